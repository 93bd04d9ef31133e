//! Tests of the fault suite: crashes, disk-full and read-only session dirs.
