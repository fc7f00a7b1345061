// Compaction: each tile writes its pool members in id order.
@group(0) @binding(0) var<storage, read> adj: array<u32>;
@group(0) @binding(1) var<storage, read> st: array<u32>;
@group(0) @binding(2) var<storage, read> tiles: array<u32>;
@group(0) @binding(3) var<storage, read_write> pool: array<vec2<u32>>;
@group(0) @binding(4) var<uniform> p: Params;

// Each tile writes its members in id order after everything the tiles
// before it keep: all their keys above the threshold and as many equal
// ones as are still wanted.
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let vocab = p.v[0].x;
    let nt = (vocab + TILE - 1u) / TILE;
    let tile = gid(wg, t);
    if (tile >= nt) { return; }
    let th = plan();
    var eq_rank = tiles[nt + tile];
    var o = tiles[tile] + min(eq_rank, th.y);
    let end = min(tile * TILE + TILE, vocab);
    for (var i = tile * TILE; i < end; i++) {
        let k = key(adj[i]);
        if (k > th.x) {
            pool[o] = vec2<u32>(k, i);
            o++;
        } else if (k == th.x) {
            if (eq_rank < th.y) {
                pool[o] = vec2<u32>(k, i);
                o++;
            }
            eq_rank++;
        }
    }
}
