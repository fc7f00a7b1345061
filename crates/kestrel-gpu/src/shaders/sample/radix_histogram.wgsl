// Radix sort: one pass's digit counts per tile.
@group(0) @binding(0) var<storage, read> src: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> hist: array<u32>;
@group(0) @binding(2) var<storage, read> st: array<u32>;
@group(0) @binding(3) var<uniform> p: Params;
@group(0) @binding(4) var<uniform> shift_u: vec4<u32>;

// Digit counts per tile of the inverted key (ascending inverted keys are
// descending keys), digit-major so that one scan gives every offset.
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let nt = (p.v[2].w + TILE - 1u) / TILE;
    let tile = gid(wg, t);
    if (tile >= nt) { return; }
    for (var b = 0u; b < 256u; b++) { hist[b * nt + tile] = 0u; }
    let n = st[NPOOL];
    let end = min(tile * TILE + TILE, n);
    for (var i = tile * TILE; i < end; i++) {
        let d = ((~src[i].x) >> shift_u.x) & 255u;
        hist[d * nt + tile] += 1u;
    }
}
