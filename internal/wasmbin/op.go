package wasmbin

// Opcodes of the instructions wasmhost reads or writes by name. The
// metering rewriter classifies every opcode by ranges (see its opKinds
// table); those ranges start and end at the constants here.
const (
	OpUnreachable        byte = 0x00
	OpNop                byte = 0x01
	OpBlock              byte = 0x02
	OpLoop               byte = 0x03
	OpIf                 byte = 0x04
	OpElse               byte = 0x05
	OpTry                byte = 0x06 // exception handling, from here to OpThrowRef
	OpThrowRef           byte = 0x0a
	OpEnd                byte = 0x0b
	OpBr                 byte = 0x0c
	OpBrIf               byte = 0x0d
	OpBrTable            byte = 0x0e
	OpReturn             byte = 0x0f
	OpCall               byte = 0x10
	OpCallIndirect       byte = 0x11
	OpReturnCall         byte = 0x12
	OpReturnCallIndirect byte = 0x13
	OpCallRef            byte = 0x14 // typed function references
	OpReturnCallRef      byte = 0x15
	OpDelegate           byte = 0x18 // exception handling
	OpCatchAll           byte = 0x19
	OpDrop               byte = 0x1a
	OpSelect             byte = 0x1b
	OpSelectT            byte = 0x1c
	OpTryTable           byte = 0x1f
	OpLocalGet           byte = 0x20
	OpLocalSet           byte = 0x21
	OpLocalTee           byte = 0x22
	OpGlobalGet          byte = 0x23
	OpGlobalSet          byte = 0x24
	OpTableGet           byte = 0x25
	OpTableSet           byte = 0x26
	OpI32Load            byte = 0x28 // the first load or store
	OpI64Store32         byte = 0x3e // the last load or store
	OpMemorySize         byte = 0x3f
	OpMemoryGrow         byte = 0x40
	OpI32Const           byte = 0x41
	OpI64Const           byte = 0x42
	OpF32Const           byte = 0x43
	OpF64Const           byte = 0x44
	OpI32Eqz             byte = 0x45 // the first numeric instruction
	OpI32LtS             byte = 0x48
	OpI32GeS             byte = 0x4e
	OpI32Add             byte = 0x6a
	OpI32Sub             byte = 0x6b
	OpI32Mul             byte = 0x6c
	OpI32ShrU            byte = 0x76
	OpI64Add             byte = 0x7c
	OpI64Sub             byte = 0x7d
	OpI64Mul             byte = 0x7e
	OpI64Extend32S       byte = 0xc4 // the last numeric instruction
	OpRefNull            byte = 0xd0
	OpRefIsNull          byte = 0xd1
	OpRefFunc            byte = 0xd2
	OpRefAsNonNull       byte = 0xd4 // typed function references, to OpBrOnNonNull
	OpBrOnNonNull        byte = 0xd6
	OpPrefixMisc         byte = 0xfc // saturating truncation, bulk memory and tables
	OpPrefixVec          byte = 0xfd // SIMD
	OpPrefixAtomic       byte = 0xfe // threads
)

// Sub-opcodes after OpPrefixMisc (a LEB128 u32).
const (
	MiscI64TruncSatF64U uint32 = 0x07 // the last saturating truncation
	MiscMemoryInit      uint32 = 0x08
	MiscDataDrop        uint32 = 0x09
	MiscMemoryCopy      uint32 = 0x0a
	MiscMemoryFill      uint32 = 0x0b
	MiscTableInit       uint32 = 0x0c
	MiscElemDrop        uint32 = 0x0d
	MiscTableCopy       uint32 = 0x0e
	MiscTableGrow       uint32 = 0x0f
	MiscTableSize       uint32 = 0x10
	MiscTableFill       uint32 = 0x11
)

// Opcodes after OpPrefixVec (one byte, as wazero reads them) that start
// or end a range of instructions with the same immediates.
const (
	VecV128Load          byte = 0x00 // memory argument, to VecV128Store
	VecV128Store         byte = 0x0b
	VecV128Const         byte = 0x0c // 16 bytes
	VecI8x16Shuffle      byte = 0x0d // 16 bytes
	VecI8x16ExtractLaneS byte = 0x15 // a lane byte, to VecF64x2ReplaceLane
	VecF64x2ReplaceLane  byte = 0x22
	VecV128Load8Lane     byte = 0x54 // memory argument and a lane byte, to VecV128Store64Lane
	VecV128Store64Lane   byte = 0x5b
	VecV128Load32Zero    byte = 0x5c // memory argument
	VecV128Load64Zero    byte = 0x5d // memory argument
)

// Opcodes after OpPrefixAtomic.
const (
	AtomicWait32  byte = 0x01
	AtomicWait64  byte = 0x02 // notify and the two waits: a memory argument
	AtomicFence   byte = 0x03 // and a reserved byte
	AtomicFirstRW byte = 0x10 // loads, stores and read-modify-writes, to AtomicLastRW
	AtomicLastRW  byte = 0x4e
)
