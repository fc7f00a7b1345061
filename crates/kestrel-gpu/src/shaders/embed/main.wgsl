// The embedding lookup's entry point: one thread per value of the row.
@group(0) @binding(4) var<storage, read> history: array<u32>;
// rows in the part, cols, bytes per row, position; scale bits, the
// part's first row, rows in the matrix
@group(0) @binding(5) var<uniform> q: vec4<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let e = gid.x;
    if (e >= p.y) { return; }
    let tok = history[p.w];
    if (tok >= q.z) {
        if (q.y == 0u) { y[e] = 0.0; }
        return;
    }
    if (tok < q.y || tok - q.y >= p.x) { return; }
    y[e] = val((tok - q.y) * p.z, e / 32u, e % 32u) * bitcast<f32>(q.x);
}
