func.func @f(%x: memref<5xf32>) {
  loop.kernel @k (%a = %x : memref<5xf32>) {
    loop.for %i = 0 to 5 {
      %v = loop.load %a[%i + 1] : memref<5xf32>
      loop.store %v, %a[%i] : memref<5xf32>
    }
  }
  func.return
}
