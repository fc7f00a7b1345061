// The product's entry point for types whose units add in any order.
// the part's first row in the matrix, its rows (`row` counts within it)
@group(0) @binding(7) var<uniform> p3: vec4<u32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32SG_PARAM) {
    let row = (g.y * GRID_X + g.x) * RPG + t / TPR;
    let lane = t % TPR;
    // One activation row after the other, each summed exactly as alone
    // (the weights come from cache after the first).
    for (var c = 0u; c < p2.x; c++) {
        set_col(c);
        var s = 0.0;
        if (row < p3.y) {
            let base = row * p.z;
            for (var u = lane; u < p.w; u += TPR) {
                s += unit(base, u);
            }
        }
        REDUCE
    }
}
