"""Helpers shared by several test modules (no tests here): test modules import from this package, never from
each other. Object builders used by the benchmarks as well live in the top-level ``testkit`` package."""
