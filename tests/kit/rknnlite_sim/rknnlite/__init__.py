"""A stand-in `rknnlite` package for x86_64 (see rknnlite/api): tests/kit only, never installed."""
