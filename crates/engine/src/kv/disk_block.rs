//! `DiskBlock`: one prefix-cache block as the disk tier stores it, a self-checking file.
//!
//! A file holds a header (magic, the tier's fingerprint of model, KV dtype and block size,
//! the block's chained key, its parent's key and its tokens), the page's raw bytes, and a
//! SHA-256 of everything before it. A block is served only when every part checks: the
//! magic and fingerprint (so a file written for another model, dtype or block size never
//! matches), the key, parent and tokens the lookup asked for (so even a key collision
//! cannot hand out another prefix's KV, as in RAM), the page's length, and the checksum
//! (so a torn or corrupted file is never read as KV).

use crate::kv::block_manager::BlockHash;
use sha2::{Digest, Sha256};

/// The first bytes of every block file; the digit is the format's version.
const MAGIC: &[u8; 8] = b"TMKVBLK1";

/// A block's identity and page bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskBlock {
    pub hash: BlockHash,
    pub parent: Option<BlockHash>,
    pub tokens: Vec<u32>,
    /// The page's bytes over every layer, as `KvCache::copy_page_out` lays them out.
    pub page: Vec<u8>,
}

/// Why a file was not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadBlock {
    /// Shorter than its header and checksum say (a torn write, a truncated file).
    Truncated,
    /// The checksum does not match the contents (corruption).
    Checksum,
    /// Not a block file, or one of another format version.
    Magic,
    /// Written for another model, KV dtype or block size.
    Foreign,
    /// Another block's file (key, parent or tokens differ from what was asked).
    OtherBlock,
    /// The page is not the size this cache's pages are.
    PageSize,
}

impl std::fmt::Display for BadBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Truncated => "truncated",
            Self::Checksum => "checksum mismatch",
            Self::Magic => "not a block file of this version",
            Self::Foreign => "written for another model, KV dtype or block size",
            Self::OtherBlock => "holds another block",
            Self::PageSize => "page of the wrong size",
        })
    }
}

impl DiskBlock {
    /// The file's bytes under `fingerprint`.
    pub fn encode(&self, fingerprint: &[u8; 32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.page.len() + 4 * self.tokens.len() + 160);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(fingerprint);
        out.extend_from_slice(self.hash.as_bytes());
        match self.parent {
            Some(p) => {
                out.push(1);
                out.extend_from_slice(p.as_bytes());
            }
            None => {
                out.push(0);
                out.extend_from_slice(&[0; 32]);
            }
        }
        out.extend_from_slice(&(self.tokens.len() as u32).to_le_bytes());
        for t in &self.tokens {
            out.extend_from_slice(&t.to_le_bytes());
        }
        out.extend_from_slice(&(self.page.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.page);
        let sum: [u8; 32] = Sha256::digest(&out).into();
        out.extend_from_slice(&sum);
        out
    }

    /// The page of a file's `bytes`, if it is whole, written under `fingerprint`, and holds
    /// the block keyed `hash` after `parent` with `tokens`, of `page_bytes` bytes.
    pub fn decode(
        bytes: &[u8],
        fingerprint: &[u8; 32],
        expect: &Expected<'_>,
    ) -> Result<Vec<u8>, BadBlock> {
        let mut r = Reader { bytes, at: 0 };
        if r.take(MAGIC.len())? != MAGIC {
            return Err(BadBlock::Magic);
        }
        let body_end = bytes.len().checked_sub(32).ok_or(BadBlock::Truncated)?;
        let sum: [u8; 32] = Sha256::digest(&bytes[..body_end]).into();
        if sum[..] != bytes[body_end..] {
            // A short file fails here too; name what it most likely is.
            return Err(if bytes.len() < expect.page_bytes {
                BadBlock::Truncated
            } else {
                BadBlock::Checksum
            });
        }
        let r_fp = r.take(32)?;
        if r_fp != fingerprint {
            return Err(BadBlock::Foreign);
        }
        let hash = r.take(32)?;
        let has_parent = r.take(1)?[0];
        let parent = r.take(32)?;
        let parent_ok = match expect.parent {
            Some(p) => has_parent == 1 && parent == p.as_bytes(),
            None => has_parent == 0,
        };
        if hash != expect.hash.as_bytes() || !parent_ok {
            return Err(BadBlock::OtherBlock);
        }
        let n = u32::from_le_bytes(r.take(4)?.try_into().expect("4 bytes")) as usize;
        if n != expect.tokens.len() {
            return Err(BadBlock::OtherBlock);
        }
        let tokens = r.take(4 * n)?;
        let same = tokens
            .chunks_exact(4)
            .zip(expect.tokens)
            .all(|(b, &t)| b == t.to_le_bytes());
        if !same {
            return Err(BadBlock::OtherBlock);
        }
        let len = u64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
        if len != expect.page_bytes as u64 || r.at + expect.page_bytes != body_end {
            return Err(BadBlock::PageSize);
        }
        Ok(r.take(expect.page_bytes)?.to_vec())
    }
}

/// What a lookup expects a block file to hold.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    pub hash: BlockHash,
    pub parent: Option<BlockHash>,
    pub tokens: &'a [u32],
    pub page_bytes: usize,
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BadBlock> {
        let end = self.at.checked_add(n).ok_or(BadBlock::Truncated)?;
        let out = self.bytes.get(self.at..end).ok_or(BadBlock::Truncated)?;
        self.at = end;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block() -> DiskBlock {
        let parent = BlockHash::chain(None, &[1, 2]);
        let tokens = vec![3, 4];
        DiskBlock {
            hash: BlockHash::chain(Some(parent), &tokens),
            parent: Some(parent),
            tokens,
            page: (0..64).collect(),
        }
    }

    fn expected(b: &DiskBlock) -> Expected<'_> {
        Expected {
            hash: b.hash,
            parent: b.parent,
            tokens: &b.tokens,
            page_bytes: b.page.len(),
        }
    }

    #[test]
    fn a_block_reads_back_as_written() {
        let b = block();
        let file = b.encode(&[7; 32]);
        assert_eq!(
            DiskBlock::decode(&file, &[7; 32], &expected(&b)),
            Ok(b.page)
        );
    }

    #[test]
    fn a_file_under_another_fingerprint_is_foreign() {
        let b = block();
        let file = b.encode(&[7; 32]);
        assert_eq!(
            DiskBlock::decode(&file, &[8; 32], &expected(&b)),
            Err(BadBlock::Foreign)
        );
    }

    #[test]
    fn every_truncation_and_every_flipped_byte_is_refused() {
        let b = block();
        let file = b.encode(&[7; 32]);
        for len in 0..file.len() {
            assert!(DiskBlock::decode(&file[..len], &[7; 32], &expected(&b)).is_err());
        }
        for i in 0..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0x10;
            assert!(
                DiskBlock::decode(&bad, &[7; 32], &expected(&b)).is_err(),
                "byte {i} flipped"
            );
        }
    }

    #[test]
    fn a_file_of_another_block_is_not_served_for_this_one() {
        let b = block();
        let file = b.encode(&[7; 32]);
        let other_tokens = [3, 5];
        let want = Expected {
            tokens: &other_tokens,
            ..expected(&b)
        };
        assert_eq!(
            DiskBlock::decode(&file, &[7; 32], &want),
            Err(BadBlock::OtherBlock)
        );
        let want = Expected {
            parent: None,
            ..expected(&b)
        };
        assert_eq!(
            DiskBlock::decode(&file, &[7; 32], &want),
            Err(BadBlock::OtherBlock)
        );
    }
}
