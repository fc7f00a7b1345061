// Radix select: one pass's digit histogram of the keys that match the prefix so far.
@group(0) @binding(0) var<storage, read> adj: array<u32>;
@group(0) @binding(1) var<storage, read_write> st: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<uniform> shift_u: vec4<u32>;

var<workgroup> h: array<atomic<u32>, 256>;

// 4096 keys per workgroup: local counts first, then one global add per
// digit.
@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    atomicStore(&h[t], 0u);
    workgroupBarrier();
    let vocab = p.v[0].x;
    let shift = shift_u.x;
    let prefix = atomicLoad(&st[SEL_PREFIX]);
    // The digits above this pass must match those chosen so far (none in
    // the first pass; a shift by 32 would wrap, hence the select).
    let hi = select(0xffffffffu << (shift + 8u), 0u, shift >= 24u);
    let base = (wg.y * GRID_X + wg.x) * 4096u;
    for (var j = 0u; j < 16u; j++) {
        let i = base + j * 256u + t;
        if (i < vocab) {
            let k = key(adj[i]);
            if ((k & hi) == (prefix & hi)) {
                atomicAdd(&h[(k >> shift) & 255u], 1u);
            }
        }
    }
    workgroupBarrier();
    let c = atomicLoad(&h[t]);
    if (c > 0u) {
        atomicAdd(&st[HIST + t], c);
    }
}
