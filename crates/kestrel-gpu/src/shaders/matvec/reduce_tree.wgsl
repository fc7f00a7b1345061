// The butterfly over a row's lanes (several threads per row).
var k = TPR / 2u;
    while (k >= SG_SIZE && k > 0u) {
        part[t] = s;
        workgroupBarrier();
        s = s + part[t ^ k];
        workgroupBarrier();
        k >>= 1u;
    }
    SHUFFLE
    if (lane == 0u && row < p3.y) {
        y[c * p.x + p3.x + row] = FINISH;
    }
