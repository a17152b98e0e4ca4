"""Test doubles and harnesses shipped with the package: the fake backend (unit tests of the layers above
backends) and a real ``sandbox server`` subprocess (Docker tests and benchmarks). Nothing in production
imports this package."""
