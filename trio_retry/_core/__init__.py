"""The pure retry-decision core: no trio, no sockets, no ssl, no h11/h2, no clock reads.

Everything here takes time and randomness as arguments, so that every decision can be asserted
exactly in synchronous tests.
"""
