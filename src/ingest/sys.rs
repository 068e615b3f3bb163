//! The only `unsafe` code of the receivers: system calls that neither std nor socket2 offer
//! with initialised buffers: `recvmsg` (to see `MSG_TRUNC`), `recvmmsg`, `SO_RCVBUFFORCE`,
//! and `SO_MEMINFO` (the kernel's per-socket drop counter).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Do not block: used while draining at shutdown.
pub(super) const DONT_WAIT: i32 = libc::MSG_DONTWAIT;

/// Receives one datagram into `buf` with `recvmsg(2)`.
///
/// Returns the bytes stored and whether the datagram was longer than `buf` (`MSG_TRUNC`: the
/// rest is discarded by the kernel).
pub(super) fn recv_one(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    flags: i32,
) -> io::Result<(usize, bool)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: `msghdr` is a plain C struct for which all-zero bytes are a valid value (null
    // pointers, zero lengths); the fields that matter are set right below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    // SAFETY: `fd` is a valid open socket for the duration of the borrow; `msg` points to one
    // iovec that describes `buf`, which is valid for writes of `buf.len()` bytes and not
    // otherwise accessed during the call; no name or control buffer is passed.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, flags) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, msg.msg_flags & libc::MSG_TRUNC != 0))
}

/// Buffers and headers for `recvmmsg(2)`: `count` slots of `slot` bytes each.
///
/// The headers hold raw pointers into `iovecs` and `bufs`. Those are `Vec`s allocated once in
/// [`MmsgBatch::new`] and never resized, so the heap memory they point to never moves (moving
/// the struct moves only the `Vec` handles). The type is not `Send` (raw pointers); it is
/// built on the thread that uses it.
#[cfg(target_os = "linux")]
pub(super) struct MmsgBatch {
    slot: usize,
    bufs: Vec<u8>,
    // Kept alive for the pointers in `hdrs`; never read from Rust.
    _iovecs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

#[cfg(target_os = "linux")]
impl MmsgBatch {
    /// Allocates `count` slots of `slot` bytes (zeroed lazily by the allocator).
    pub(super) fn new(count: usize, slot: usize) -> MmsgBatch {
        let count = count.max(1);
        let mut bufs = vec![0u8; count * slot];
        let base = bufs.as_mut_ptr();
        let mut iovecs: Vec<libc::iovec> = (0..count)
            .map(|i| libc::iovec {
                iov_base: base.wrapping_add(i * slot).cast(),
                iov_len: slot,
            })
            .collect();
        let iov_base = iovecs.as_mut_ptr();
        let hdrs = (0..count)
            .map(|i| {
                // SAFETY: `mmsghdr` is a plain C struct; all-zero bytes are a valid value.
                let mut hdr: libc::mmsghdr = unsafe { std::mem::zeroed() };
                hdr.msg_hdr.msg_iov = iov_base.wrapping_add(i);
                hdr.msg_hdr.msg_iovlen = 1;
                hdr
            })
            .collect();
        MmsgBatch {
            slot,
            bufs,
            _iovecs: iovecs,
            hdrs,
        }
    }

    /// Receives up to `count` datagrams in one call. Without `DONT_WAIT` it blocks for the
    /// first one (up to the socket's read timeout) and then takes only what is already queued
    /// (`MSG_WAITFORONE`). Returns how many were received; read them with [`Self::packet`].
    pub(super) fn recv(&mut self, fd: BorrowedFd<'_>, flags: i32) -> io::Result<usize> {
        let flags = flags | libc::MSG_WAITFORONE;
        // SAFETY: `fd` is a valid open socket for the duration of the borrow. Every header
        // points to its own iovec in `_iovecs`, and every iovec to its own disjoint `slot`
        // bytes of `bufs`; all three allocations live as long as `self`, are not resized, and
        // are not accessed from Rust during the call (`&mut self`). No name or control buffer
        // is passed, and a null timeout means the socket's own timeout applies.
        let n = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                flags as _,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Datagram `i` of the last [`Self::recv`] (`i` below its result) and whether it was
    /// truncated to the slot size.
    pub(super) fn packet(&self, i: usize) -> (&[u8], bool) {
        let hdr = &self.hdrs[i];
        let len = (hdr.msg_len as usize).min(self.slot);
        let start = i * self.slot;
        (
            &self.bufs[start..start + len],
            hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
        )
    }
}

/// Sets `SO_RCVBUFFORCE` (ignores `net.core.rmem_max`; needs `CAP_NET_ADMIN`).
#[cfg(target_os = "linux")]
pub(super) fn set_recv_buffer_force(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let value =
        libc::c_int::try_from(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is a valid open socket; the option value is a live `c_int` whose size is
    // passed alongside; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Not available outside Linux.
#[cfg(not(target_os = "linux"))]
pub(super) fn set_recv_buffer_force(_fd: BorrowedFd<'_>, _bytes: usize) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// The kernel's count of packets dropped at this socket (receive queue full), from
/// `SO_MEMINFO`. It is a wrapping 32-bit counter.
#[cfg(target_os = "linux")]
pub(super) fn kernel_drops(fd: BorrowedFd<'_>) -> io::Result<u32> {
    const VARS: usize = 9;
    let drops = libc::SK_MEMINFO_DROPS as usize;
    let mut meminfo = [0u32; VARS];
    let mut len = std::mem::size_of_val(&meminfo) as libc::socklen_t;
    // SAFETY: `fd` is a valid open socket; `meminfo` is writable for `len` bytes and the
    // kernel writes at most `len` bytes, storing the length it wrote back into `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            meminfo.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if (len as usize) < (drops + 1) * 4 {
        return Err(io::Error::from(io::ErrorKind::Unsupported));
    }
    Ok(meminfo[drops])
}

/// Not available outside Linux.
#[cfg(not(target_os = "linux"))]
pub(super) fn kernel_drops(_fd: BorrowedFd<'_>) -> io::Result<u32> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}
