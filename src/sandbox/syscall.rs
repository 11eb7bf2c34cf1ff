//! The one reading of a raw system call's result the sandbox's parts share.

use std::io;

/// A system call's result as an `io::Result`: a negative one carries `errno`.
pub(super) fn check(result: libc::c_int) -> io::Result<()> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}
