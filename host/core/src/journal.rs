//! The invocation journal seam (filled by the capgate-store issue).
