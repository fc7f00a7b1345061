// The row's sum written as it is (one thread per row).
if (row < p3.y) { y[c * p.x + p3.x + row] = FINISH; }
