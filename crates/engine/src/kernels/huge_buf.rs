//! `HugeBuf`: weight storage packed side by side into 2 MiB-aligned chunks that the kernel is
//! asked to back with transparent huge pages.
//!
//! Decode reads every weight once per step. On 4 KiB pages that stream crosses a page every
//! few hundred cycles, and each crossing costs a TLB walk and restarts the hardware
//! prefetcher; on 2 MiB pages it does not. A model's matrices are mostly far smaller than
//! 2 MiB (SmolLM2's are 69 KiB to 1.1 MiB), so giving each its own allocation would leave
//! them on small pages: they are packed into shared chunks instead. A chunk is freed when
//! the last buffer in it is dropped; a large buffer gets a chunk of its own. Where the OS has no transparent huge pages (or another
//! OS) this is plain aligned memory.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// The huge page size chunks are aligned to and sized in.
const HUGE_PAGE: usize = 2 << 20;
/// Small buffers share chunks of this size; larger ones get a chunk of their own.
const CHUNK: usize = 16 << 20;
/// Every buffer starts on a cache line.
const LINE: usize = 64;

/// Element types that are valid when all their bytes are zero and hold no pointers.
pub trait Plain: Copy + Send + Sync + 'static {}
impl Plain for u8 {}
impl Plain for u16 {}
impl Plain for i16 {}
impl Plain for f32 {}

/// One huge-page-aligned, zero-filled allocation, shared by the buffers carved from it.
struct Chunk {
    ptr: NonNull<u8>,
    bytes: usize,
    /// What to give back on drop: the mapping, or the allocator's block.
    release: Release,
}

enum Release {
    #[cfg(unix)]
    Unmap { base: *mut libc::c_void, len: usize },
    #[cfg_attr(unix, allow(dead_code))]
    Dealloc(Layout),
}

// SAFETY: a chunk is raw memory; each buffer in it owns a disjoint range.
unsafe impl Send for Chunk {}
unsafe impl Sync for Chunk {}

impl Chunk {
    /// At least `bytes` of zeroes on a huge page boundary. Anonymous mappings are zero
    /// and backed only as they are touched, so a large buffer (a KV pool, a bandwidth
    /// probe) costs no memory until used, and nothing writes its zeroes.
    fn new(bytes: usize) -> Self {
        let bytes = bytes.next_multiple_of(HUGE_PAGE);
        #[cfg(unix)]
        {
            let len = bytes + HUGE_PAGE;
            // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if base != libc::MAP_FAILED {
                let skip = (base as usize).next_multiple_of(HUGE_PAGE) - base as usize;
                // SAFETY: `skip < HUGE_PAGE`, so `bytes` from there lie inside the mapping.
                let ptr = unsafe { base.cast::<u8>().add(skip) };
                advise_huge_pages(ptr, bytes);
                return Self {
                    ptr: NonNull::new(ptr).expect("mmap returned null"),
                    bytes,
                    release: Release::Unmap { base, len },
                };
            }
        }
        let layout = Layout::from_size_align(bytes, HUGE_PAGE).expect("a chunk's size overflows");
        // SAFETY: `layout` has a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
            .unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self {
            ptr,
            bytes,
            release: Release::Dealloc(layout),
        }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        match self.release {
            #[cfg(unix)]
            // SAFETY: the mapping made in `new`, unmapped once.
            Release::Unmap { base, len } => unsafe {
                libc::munmap(base, len);
            },
            // SAFETY: allocated in `new` with this layout.
            Release::Dealloc(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) },
        }
    }
}

/// Asks for huge pages before the memory is first touched, so faults map 2 MiB at a time.
fn advise_huge_pages(ptr: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    // SAFETY: `ptr..ptr + bytes` lies in one live mapping; the advice changes no contents.
    unsafe {
        libc::madvise(ptr.cast(), bytes, libc::MADV_HUGEPAGE);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// The system's transparent huge page mode, for the startup log: the weights get huge
/// pages under `always` and `madvise`, not under `never`.
pub fn transparent_huge_pages() -> String {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|modes| {
            let start = modes.find('[')? + 1;
            let end = start + modes[start..].find(']')?;
            Some(format!("THP mode: {}", &modes[start..end]))
        })
        .unwrap_or_else(|| "THP mode: unknown".into())
}

/// The chunk small buffers are being carved from, and how much of it is taken.
struct Pool {
    current: Option<Arc<Chunk>>,
    used: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    current: None,
    used: 0,
});

/// A fixed-length, zero-initialised `[T]` in a huge-page chunk (see the module docs).
pub struct HugeBuf<T: Plain> {
    /// Keeps the memory alive; `None` for an empty buffer.
    _chunk: Option<Arc<Chunk>>,
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: a `HugeBuf` owns its range exclusively, like a `Box<[T]>`.
unsafe impl<T: Plain> Send for HugeBuf<T> {}
unsafe impl<T: Plain> Sync for HugeBuf<T> {}

impl<T: Plain> HugeBuf<T> {
    /// `len` zeroes.
    pub fn zeroed(len: usize) -> Self {
        let bytes = len
            .checked_mul(size_of::<T>())
            .expect("a weight buffer's size overflows");
        if bytes == 0 {
            return Self {
                _chunk: None,
                ptr: NonNull::dangling(),
                len,
            };
        }
        let (chunk, offset) = Self::carve(bytes);
        // SAFETY: `offset + bytes` lies inside the chunk and no buffer used that range
        // before (chunks are carved front to back, never reused), so it is still zero.
        let ptr = unsafe { NonNull::new_unchecked(chunk.ptr.as_ptr().add(offset).cast::<T>()) };
        Self {
            _chunk: Some(chunk),
            ptr,
            len,
        }
    }

    /// A copy of `src`.
    pub fn from_slice(src: &[T]) -> Self {
        let mut buf = Self::zeroed(src.len());
        buf.copy_from_slice(src);
        buf
    }

    /// A range of `bytes` no other buffer holds: in the shared chunk when it fits, else in
    /// a chunk of its own.
    fn carve(bytes: usize) -> (Arc<Chunk>, usize) {
        if bytes > CHUNK / 4 {
            return (Arc::new(Chunk::new(bytes)), 0);
        }
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        let offset = pool.used.next_multiple_of(LINE);
        let chunk = match &pool.current {
            Some(chunk) if offset + bytes <= chunk.bytes => chunk.clone(),
            _ => {
                let fresh = Arc::new(Chunk::new(CHUNK));
                pool.current = Some(fresh.clone());
                pool.used = bytes;
                return (fresh, 0);
            }
        };
        pool.used = offset + bytes;
        (chunk, offset)
    }
}

impl<T: Plain> std::ops::Deref for HugeBuf<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points at `len` initialised elements this buffer owns (or is
        // dangling with `len · size_of::<T>() == 0`).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Plain> std::ops::DerefMut for HugeBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as `deref`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Plain> Clone for HugeBuf<T> {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl<T: Plain> std::fmt::Debug for HugeBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HugeBuf({} elements)", self.len)
    }
}

impl<T: Plain> From<Vec<T>> for HugeBuf<T> {
    fn from(v: Vec<T>) -> Self {
        Self::from_slice(&v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_sharing_a_chunk_keep_their_own_contents() {
        let mut a = HugeBuf::<u16>::zeroed(1000);
        let mut b = HugeBuf::<u8>::zeroed(333);
        assert!(a.iter().all(|&v| v == 0) && b.iter().all(|&v| v == 0));
        a.iter_mut().enumerate().for_each(|(i, v)| *v = i as u16);
        b.fill(7);
        let c = a.clone();
        drop(a);
        assert!(c.iter().enumerate().all(|(i, &v)| v == i as u16));
        assert!(b.iter().all(|&v| v == 7));
        assert_eq!(c.as_ptr() as usize % LINE, 0);
    }

    #[test]
    fn a_buffer_larger_than_a_shared_chunk_gets_its_own() {
        let big = HugeBuf::<u8>::zeroed(CHUNK + 1);
        assert_eq!(big.len(), CHUNK + 1);
        assert_eq!(big.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(big[CHUNK], 0);
        assert!(HugeBuf::<u16>::zeroed(0).is_empty());
    }
}
