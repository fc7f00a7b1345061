// Compaction: each tile's count of keys above and equal to the threshold.
@group(0) @binding(0) var<storage, read> adj: array<u32>;
@group(0) @binding(1) var<storage, read> st: array<u32>;
@group(0) @binding(2) var<storage, read_write> tiles: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let vocab = p.v[0].x;
    let nt = (vocab + TILE - 1u) / TILE;
    let tile = gid(wg, t);
    if (tile >= nt) { return; }
    let th = plan();
    var above = 0u;
    var equal = 0u;
    let end = min(tile * TILE + TILE, vocab);
    for (var i = tile * TILE; i < end; i++) {
        let k = key(adj[i]);
        if (k > th.x) { above++; } else if (k == th.x) { equal++; }
    }
    tiles[tile] = above;
    tiles[nt + tile] = equal;
}
