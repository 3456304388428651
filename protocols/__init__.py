"""Sans-IO wire formats for Nintendo's Pia and PRUDP protocols.

Nothing in this package performs I/O or reads a clock: bytes in, frozen values
out, and back, byte-exact.  Decoders raise only :class:`protocols.errors.DecodeError`
and its subclasses.
"""
