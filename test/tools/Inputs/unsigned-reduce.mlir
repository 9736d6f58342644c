// A reduction over an unsigned integer type: combining it needs signless arith ops.
func.func @f(%x: memref<8xui8>) {
  loop.kernel @k (%a = %x : memref<8xui8>) {
    %s = loop.reduce add %k = 0 to 8 : ui8 {
      %v = loop.load %a[%k] : memref<8xui8>
      loop.yield %v : ui8
    }
    loop.store %s, %a[0] : memref<8xui8>
  }
  func.return
}
