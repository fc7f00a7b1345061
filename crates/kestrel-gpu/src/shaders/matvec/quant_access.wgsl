// The quantized activations of the batch row being multiplied.
// rows in the batch, quant words per row, scale words per row
@group(0) @binding(6) var<uniform> p2: vec4<u32>;
var<private> col_q: u32;
var<private> col_m: u32;
fn set_col(c: u32) {
    col_q = c * p2.y;
    col_m = c * p2.z;
}
fn aq(i: u32) -> u32 { return xq[col_q + i]; }
fn am(i: u32) -> u32 { return xm[col_m + i]; }
