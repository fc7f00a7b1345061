// The product's entry point for the legacy types, in ggml's lane order.
// the part's first row in the matrix, its rows (`row` counts within it),
// one chain per row (repacked Q4_0)
@group(0) @binding(7) var<uniform> p3: vec4<u32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) t: u32SG_PARAM) {
    let row = (g.y * GRID_X + g.x) * RPG + t / TPR;
    let lane = t % TPR;
    for (var c = 0u; c < p2.x; c++) {
        set_col(c);
        var s = 0.0;
        var summs = 0.0;
        if (row < p3.y) {
            let base = row * p.z;
            if (p3.z != 0u) {
                if (lane == 0u) {
                    for (var u = 0u; u < p.w; u++) {
                        var isum = 0i;
                        for (var l = 0u; l < 8u; l++) { isum += lane_sum(base, u, l); }
                        s = fma_int(scale(base, u), isum, s);
                    }
                }
            } else {
                var acc = array<f32, 8>(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
                for (var u = 0u; u < p.w; u++) {
                    let d = scale(base, u);
                    for (var l = lane; l < 8u; l += TPR) {
                        acc[l] = fma_int(d, lane_sum(base, u, l), acc[l]);
                    }
                    if (lane == 0u) { summs = min_term(base, u, summs); }
                }
                for (var k = 4u; k >= TPR; k >>= 1u) {
                    for (var l = lane; l < k; l += TPR) { acc[l] = acc[l] + acc[l + k]; }
                }
                s = acc[lane];
            }
        }
        REDUCE
    }
}
