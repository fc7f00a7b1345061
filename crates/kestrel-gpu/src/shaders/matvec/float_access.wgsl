// The float activations of the batch row being multiplied.
// rows in the batch
@group(0) @binding(6) var<uniform> p2: vec4<u32>;
var<private> col_x: u32;
fn set_col(c: u32) { col_x = c * p.y; }
fn ax(i: u32) -> f32 { return x[col_x + i]; }
