// Radix sort: one pass's stable scatter.
@group(0) @binding(0) var<storage, read> src: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> hist: array<u32>;
@group(0) @binding(3) var<storage, read> st: array<u32>;
@group(0) @binding(4) var<uniform> p: Params;
@group(0) @binding(5) var<uniform> shift_u: vec4<u32>;

// Each tile walks its elements in order, so equal digits keep their order
// (the sort is stable and ties stay in id order).
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let nt = (p.v[2].w + TILE - 1u) / TILE;
    let tile = gid(wg, t);
    if (tile >= nt) { return; }
    let n = st[NPOOL];
    let end = min(tile * TILE + TILE, n);
    for (var i = tile * TILE; i < end; i++) {
        let e = src[i];
        let slot = (((~e.x) >> shift_u.x) & 255u) * nt + tile;
        let o = hist[slot];
        hist[slot] = o + 1u;
        dst[o] = e;
    }
}
