// The butterfly's exchange through workgroup memory.
var<workgroup> part: array<f32, 64>;
