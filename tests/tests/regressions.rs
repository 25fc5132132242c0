//! Minimal reproducers of bugs the feature tests found, one program each, so that a failure
//! names its cause.

use ompcluster_tests::check_program;

/// `map(tofrom: p[1000:1000])`: libomptarget passes the kernel `p` (begin of the mapped data
/// minus 4000 bytes), an address before the device buffer.
#[test]
fn section_not_starting_at_zero() {
    check_program("repro_section_offset.c", &[], &[]);
}
