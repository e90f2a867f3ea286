//! The two hashes MIP derives from MD5 (RFC 1321), over RustCrypto's `md-5` crate.

use md5::{Digest, Md5};

/// The 16-byte MD5 digest of `data`.
pub fn md5(data: &[u8]) -> [u8; 16] {
    Md5::digest(data).into()
}

/// A function's signature in a `.mip`: the first 8 bytes of the MD5 digest of its name,
/// read as a little-endian integer (what LLVM's `MD5Hash` returns).
pub fn md5_hash(name: &str) -> u64 {
    let d = md5(name.as_bytes());
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// The header's module hash: [`md5_hash`] of the link unit's name, truncated to its low
/// 32 bits (the compiler stores `(uint32_t)MD5Hash(LinkUnitName)`).
pub fn module_hash(link_unit_name: &str) -> u32 {
    md5_hash(link_unit_name) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(d: [u8; 16]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn rfc1321_test_suite() {
        let vectors: [(&str, &str); 7] = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (input, expected) in vectors {
            assert_eq!(hex(md5(input.as_bytes())), expected, "MD5({input:?})");
        }
    }

    #[test]
    fn block_boundaries() {
        // 55, 56, 63, 64 and 65 bytes: the padding spills into a second block at 56.
        let expected = [
            (55, "ef1772b6dff9a122358552954ad0df65"),
            (56, "3b0c8ac703f828b04c6c197006d17218"),
            (63, "b06521f39153d618550606be297466d5"),
            (64, "014842d480b571495a4a0363793f7367"),
            (65, "c743a45e0d2e6a95cb859adae0248435"),
        ];
        for (n, digest) in expected {
            assert_eq!(hex(md5(&vec![b'a'; n])), digest, "{n} x 'a'");
        }
    }

    #[test]
    fn llvm_style_hashes() {
        assert_eq!(md5_hash(""), 0x04b2008fd98c1dd4);
        assert_eq!(md5_hash("_Z3foov"), 0x7f8d88fcc70a347b);
        assert_eq!(module_hash("main"), 0xe78dd5fa);
    }
}
