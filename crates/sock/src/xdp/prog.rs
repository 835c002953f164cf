//! The XDP program: IPv4/UDP datagrams to one port go to the AF_XDP socket of the queue they
//! arrived on; everything else — ARP, IPv6 neighbour discovery, other ports, fragments, IP
//! options — passes to the kernel, so the interface keeps working while the benchmark runs.

use super::insn::{self, Insn, Size};

/// XDP verdicts (include/uapi/linux/bpf.h `enum xdp_action`).
pub const XDP_PASS: i32 = 2;
/// `bpf_redirect_map` (BPF_FUNC_redirect_map).
const BPF_FUNC_REDIRECT_MAP: i32 = 51;

/// Bytes of Ethernet (14), IPv4 without options (20) and UDP (8) headers.
pub const HEADERS: usize = 42;

/// The program for `port`, redirecting into the XSKMAP whose fd is `xsks_map`.
///
/// ```text
///  0  r6 = r1                       ctx (struct xdp_md)
///  1  r2 = *(u32 *)(r1 + 0)         data
///  2  r3 = *(u32 *)(r1 + 4)         data_end
///  3  r4 = r2
///  4  r4 += 42
///  5  if r4 > r3 goto pass          shorter than Ethernet + IPv4 + UDP
///  6  r5 = *(u16 *)(r2 + 12)        ethertype
///  7  if r5 != htons(0x0800) goto pass
///  8  r5 = *(u8 *)(r2 + 14)         version and IHL
///  9  if r5 != 0x45 goto pass       IPv4 without options (the UDP header is at 34)
/// 10  r5 = *(u8 *)(r2 + 23)         protocol
/// 11  if r5 != 17 goto pass
/// 12  r5 = *(u16 *)(r2 + 20)        flags and fragment offset
/// 13  r5 &= htons(0x3fff)           MF or an offset: a fragment, no UDP header of its own
/// 14  if r5 != 0 goto pass
/// 15  r5 = *(u16 *)(r2 + 36)        UDP destination port
/// 16  if r5 != htons(port) goto pass
/// 17  r2 = *(u32 *)(r6 + 16)        ctx->rx_queue_index: the key
/// 18  r1 = xsks_map                 (two slots)
/// 20  r3 = XDP_PASS                 what redirect_map returns when the queue has no socket
/// 21  call bpf_redirect_map
/// 22  exit
/// 23  pass: r0 = XDP_PASS
/// 24  exit
/// ```
///
/// Loads are little-endian on the host, so network-order constants are byte-swapped.
pub fn udp_port_redirect(port: u16, xsks_map: i32) -> Vec<Insn> {
    let be16 = |v: u16| i32::from(v.swap_bytes());
    // Offsets of `goto pass` from instruction i: pass is at 23, a jump lands at i + 1 + off.
    let to_pass = |i: i16| 23 - (i + 1);
    let mut p = vec![
        insn::mov_reg(6, 1),
        insn::load(Size::U32, 2, 1, 0),
        insn::load(Size::U32, 3, 1, 4),
        insn::mov_reg(4, 2),
        insn::add_imm(4, HEADERS as i32),
        insn::jgt_reg(4, 3, to_pass(5)),
        insn::load(Size::U16, 5, 2, 12),
        insn::jne_imm(5, be16(0x0800), to_pass(7)),
        insn::load(Size::U8, 5, 2, 14),
        insn::jne_imm(5, 0x45, to_pass(9)),
        insn::load(Size::U8, 5, 2, 23),
        insn::jne_imm(5, 17, to_pass(11)),
        insn::load(Size::U16, 5, 2, 20),
        insn::and_imm(5, be16(0x3fff)),
        insn::jne_imm(5, 0, to_pass(14)),
        insn::load(Size::U16, 5, 2, 36),
        insn::jne_imm(5, be16(port), to_pass(16)),
        insn::load(Size::U32, 2, 6, 16),
    ];
    p.extend(insn::load_map_fd(1, xsks_map));
    p.extend([
        insn::mov_imm(3, XDP_PASS),
        insn::call(BPF_FUNC_REDIRECT_MAP),
        insn::exit(),
        insn::mov_imm(0, XDP_PASS),
        insn::exit(),
    ]);
    p
}

/// What the program decides for a frame, computed the way the program computes it (the
/// interpreter of these tests; the kernel's verifier and JIT run the real thing).
#[cfg(test)]
fn verdict(frame: &[u8], port: u16) -> bool {
    if frame.len() < HEADERS {
        return false;
    }
    let u16le = |o: usize| u16::from_le_bytes([frame[o], frame[o + 1]]);
    u16le(12) == 0x0800u16.swap_bytes()
        && frame[14] == 0x45
        && frame[23] == 17
        && u16le(20) & 0x3fffu16.swap_bytes() == 0
        && u16le(36) == port.swap_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_on_pass_and_the_program_ends_in_exits() {
        let p = udp_port_redirect(7777, 5);
        assert_eq!(p.len(), 25);
        for (i, ins) in p.iter().enumerate() {
            if ins.code & 0x07 == 0x05 && ins.code & 0xf0 != 0x80 && ins.code & 0xf0 != 0x90 {
                let target = i as i64 + 1 + i64::from(ins.off);
                assert_eq!(target, 23, "instruction {i}");
            }
        }
        assert_eq!(p[22], insn::exit());
        assert_eq!(p[24], insn::exit());
        assert_eq!(p[23], insn::mov_imm(0, XDP_PASS));
        // The map load carries the fd and the pseudo marker.
        assert_eq!(p[18].imm, 5);
        assert_eq!(p[18].regs >> 4, insn::PSEUDO_MAP_FD);
        // Port in network order, read as a little-endian u16.
        assert_eq!(p[16].imm, i32::from(7777u16.swap_bytes()));
    }

    fn frame(ethertype: u16, vihl: u8, proto: u8, frag: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f[14] = vihl;
        f[20..22].copy_from_slice(&frag.to_be_bytes());
        f[23] = proto;
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn only_unfragmented_ipv4_udp_to_the_port_is_taken() {
        assert!(verdict(&frame(0x0800, 0x45, 17, 0x4000, 7777), 7777)); // DF set: fine
        assert!(!verdict(&frame(0x0806, 0x45, 17, 0, 7777), 7777)); // ARP
        assert!(!verdict(&frame(0x86dd, 0x60, 17, 0, 7777), 7777)); // IPv6
        assert!(!verdict(&frame(0x0800, 0x46, 17, 0, 7777), 7777)); // IP options
        assert!(!verdict(&frame(0x0800, 0x45, 6, 0, 7777), 7777)); // TCP
        assert!(!verdict(&frame(0x0800, 0x45, 17, 0x2000, 7777), 7777)); // MF
        assert!(!verdict(&frame(0x0800, 0x45, 17, 0x0001, 7777), 7777)); // offset
        assert!(!verdict(&frame(0x0800, 0x45, 17, 0, 7778), 7777)); // other port
        assert!(!verdict(&frame(0x0800, 0x45, 17, 0, 7777)[..41], 7777)); // short
    }
}
