//! This file exists so that cargo can treat the crate as a library too (clippy, tests).
#![no_std]
