"""Model building blocks that call revolta-kernels' ops."""
