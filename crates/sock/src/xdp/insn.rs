//! eBPF instructions, encoded by hand (include/uapi/linux/bpf.h, Documentation/bpf/
//! standardization/instruction-set.rst): the filter needs fifteen of them, so no compiler,
//! ELF loader or BTF is involved, and every instruction is checked here.

/// One 8-byte instruction: opcode, destination and source registers (4 bits each, destination
/// in the low nibble on little-endian hosts), a signed 16-bit offset and a 32-bit immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub code: u8,
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

// Instruction classes, sizes, modes, operations and sources.
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const JMP: u8 = 0x05;
const ALU64: u8 = 0x07;
const W: u8 = 0x00;
const H: u8 = 0x08;
const B: u8 = 0x10;
const DW: u8 = 0x18;
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const K: u8 = 0x00;
const X: u8 = 0x08;
const ADD: u8 = 0x00;
const AND: u8 = 0x50;
const MOV: u8 = 0xb0;
const JGT: u8 = 0x20;
const JNE: u8 = 0x50;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;

/// `src_reg` of a 64-bit immediate load whose immediate is a map's file descriptor.
pub const PSEUDO_MAP_FD: u8 = 1;

/// The size of a load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    U8,
    U16,
    U32,
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    debug_assert!(dst < 11 && src < 11);
    Insn {
        code,
        regs: (src << 4) | (dst & 0x0f),
        off,
        imm,
    }
}

/// `dst = *(size *)(src + off)`.
pub fn load(size: Size, dst: u8, src: u8, off: i16) -> Insn {
    let s = match size {
        Size::U8 => B,
        Size::U16 => H,
        Size::U32 => W,
    };
    insn(LDX | MEM | s, dst, src, off, 0)
}

/// `dst = src` (64-bit).
pub fn mov_reg(dst: u8, src: u8) -> Insn {
    insn(ALU64 | MOV | X, dst, src, 0, 0)
}

/// `dst = imm` (64-bit, sign-extended).
pub fn mov_imm(dst: u8, imm: i32) -> Insn {
    insn(ALU64 | MOV | K, dst, 0, 0, imm)
}

/// `dst += imm`.
pub fn add_imm(dst: u8, imm: i32) -> Insn {
    insn(ALU64 | ADD | K, dst, 0, 0, imm)
}

/// `dst &= imm`.
pub fn and_imm(dst: u8, imm: i32) -> Insn {
    insn(ALU64 | AND | K, dst, 0, 0, imm)
}

/// `if dst > src goto +off` (unsigned).
pub fn jgt_reg(dst: u8, src: u8, off: i16) -> Insn {
    insn(JMP | JGT | X, dst, src, off, 0)
}

/// `if dst != imm goto +off`.
pub fn jne_imm(dst: u8, imm: i32, off: i16) -> Insn {
    insn(JMP | JNE | K, dst, 0, off, imm)
}

/// Calls helper `id` (arguments in r1..r5, result in r0).
pub fn call(id: i32) -> Insn {
    insn(JMP | CALL, 0, 0, 0, id)
}

pub fn exit() -> Insn {
    insn(JMP | EXIT, 0, 0, 0, 0)
}

/// `dst = map` (two slots: a 64-bit immediate whose value is the map's fd, which the verifier
/// replaces by the map's address).
pub fn load_map_fd(dst: u8, fd: i32) -> [Insn; 2] {
    [
        insn(LD | DW | IMM, dst, PSEUDO_MAP_FD, 0, fd),
        insn(0, 0, 0, 0, 0),
    ]
}

/// The program's bytes as the kernel reads them (`struct bpf_insn[]`).
pub fn to_bytes(prog: &[Insn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prog.len() * 8);
    for i in prog {
        out.push(i.code);
        out.push(i.regs);
        out.extend_from_slice(&i.off.to_le_bytes());
        out.extend_from_slice(&i.imm.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encodings checked against the kernel's own macros (include/linux/filter.h:
    /// BPF_LDX_MEM, BPF_MOV64_REG, BPF_ALU64_IMM, BPF_JMP_REG, BPF_JMP_IMM, BPF_EMIT_CALL,
    /// BPF_EXIT_INSN, BPF_LD_MAP_FD) as `bpftool prog dump xlated opcodes` prints them.
    #[test]
    fn encodings_match_the_kernel_macros() {
        let bytes = |i: Insn| to_bytes(&[i]);
        // r2 = *(u32 *)(r1 + 16)
        assert_eq!(
            bytes(load(Size::U32, 2, 1, 16)),
            [0x61, 0x12, 16, 0, 0, 0, 0, 0]
        );
        // r5 = *(u16 *)(r2 + 12)
        assert_eq!(
            bytes(load(Size::U16, 5, 2, 12)),
            [0x69, 0x25, 12, 0, 0, 0, 0, 0]
        );
        // r5 = *(u8 *)(r2 + 23)
        assert_eq!(
            bytes(load(Size::U8, 5, 2, 23)),
            [0x71, 0x25, 23, 0, 0, 0, 0, 0]
        );
        // r6 = r1
        assert_eq!(bytes(mov_reg(6, 1)), [0xbf, 0x16, 0, 0, 0, 0, 0, 0]);
        // r0 = 2
        assert_eq!(bytes(mov_imm(0, 2)), [0xb7, 0x00, 0, 0, 2, 0, 0, 0]);
        // r4 += 42
        assert_eq!(bytes(add_imm(4, 42)), [0x07, 0x04, 0, 0, 42, 0, 0, 0]);
        // r5 &= 0xff3f
        assert_eq!(
            bytes(and_imm(5, 0xff3f)),
            [0x57, 0x05, 0, 0, 0x3f, 0xff, 0, 0]
        );
        // if r4 > r3 goto +17
        assert_eq!(bytes(jgt_reg(4, 3, 17)), [0x2d, 0x34, 17, 0, 0, 0, 0, 0]);
        // if r5 != 0x8 goto +15
        assert_eq!(bytes(jne_imm(5, 8, 15)), [0x55, 0x05, 15, 0, 8, 0, 0, 0]);
        // call bpf_redirect_map (51)
        assert_eq!(bytes(call(51)), [0x85, 0, 0, 0, 51, 0, 0, 0]);
        assert_eq!(bytes(exit()), [0x95, 0, 0, 0, 0, 0, 0, 0]);
        // r1 = map fd 7 (ld_imm64 with BPF_PSEUDO_MAP_FD)
        assert_eq!(
            to_bytes(&load_map_fd(1, 7)),
            [0x18, 0x11, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        // Negative offsets keep their two's complement.
        assert_eq!(
            bytes(jne_imm(1, 0, -1)),
            [0x55, 0x01, 0xff, 0xff, 0, 0, 0, 0]
        );
    }
}
