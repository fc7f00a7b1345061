// RoPE from the host's cos/sin table, one thread per rotated pair.
@group(0) @binding(0) var<storage, read_write> v: array<f32>;
@group(0) @binding(1) var<storage, read> table: array<f32>;
@group(0) @binding(2) var<storage, read> pos: array<u32>;
// tokens, heads per token, head dim, rotated dims; neox
@group(0) @binding(3) var<uniform> p: array<vec4<u32>, 2>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let half = p[0].w / 2u;
    let i = (g.y * GRID_X + g.x) * 64u + t;
    if (i >= p[0].x * p[0].y * half) { return; }
    let pair = i % half;
    let head = i / half;
    let tok = head / p[0].y;
    let base = head * p[0].z;
    var a = base + 2u * pair;
    var b = a + 1u;
    if (p[1].x != 0u) {
        a = base + pair;
        b = a + half;
    }
    let c = table[pos[tok] * p[0].w + 2u * pair];
    let s = table[pos[tok] * p[0].w + 2u * pair + 1u];
    let x0 = v[a];
    let x1 = v[b];
    // The CPU's fused forms (as ggml's compiler contracts them).
    v[a] = fmaf(x0, c, -(x1 * s));
    v[b] = fmaf(x0, s, x1 * c);
}
