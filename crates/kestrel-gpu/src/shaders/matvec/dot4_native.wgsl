// dot4 through the adapter's packed 8-bit dot product.
fn dot4(a: u32, b: u32) -> i32 { return dot4I8Packed(a, b); }
