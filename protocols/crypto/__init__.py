"""Cipher primitives shared by the Pia and PRUDP codecs (sans-IO)."""
