"""The Rendez-Vous key exchange carried by CONNECT (seeds 000/001; spec ../shared/spec/prudp.md §4.2-§4.3).

Theory of operation:

1. The client sends an ephemeral P-256 public key ``Q_client`` in its CONNECT
   payload: 64 bytes, ``X ‖ Y`` big-endian, the SEC1 uncompressed point without
   its ``04`` prefix (spec §4.2).
2. The host makes its own ephemeral key pair, computes the ECDH result ``x`` (the
   X coordinate of ``d_host × Q_client``, 32 bytes), and answers in CONNECT+ACK
   with ``Buffer(signature) ‖ Q_host ‖ Buffer(tag)`` where

   * ``signature`` = ECDSA-P256-SHA256 over the 64 bytes of ``Q_host`` by the
     host's *certificate* key, DER-encoded (spec §4.3 step 6, [A]);
   * ``tag`` = HMAC-SHA256 keyed with ``x`` (not the derived key) over
     ``Q_client ‖ Q_host`` (spec §4.3 step 5);
   * a Buffer is a u32 little-endian length and the bytes (spec §4.2).
3. Both sides take ``SHA-1(x)[:16]`` as the AES-128 key for DATA (spec §4.3 step 4).

The client trusts a certificate public key obtained out of band; a wrong
certificate, signature or tag raises :class:`AuthenticationError` naming which
check failed.  pycryptodome provides ECC and ECDSA, so no optional dependency is
needed.
"""

from __future__ import annotations

import hashlib
import hmac

import attrs
from Crypto.Hash import SHA256
from Crypto.PublicKey import ECC
from Crypto.Signature import DSS

from protocols.errors import AuthenticationError, BadValue, ConfigError
from protocols.wire import Reader, Writer

__all__ = [
    "HostHello",
    "client_finish",
    "derive_session_key",
    "ecdh",
    "generate_key",
    "host_accept",
    "load_public_key",
    "public_bytes",
    "sign_host_key",
    "tag_for",
    "verify_host_key",
]

EccKey = ECC.EccKey


def generate_key() -> EccKey:
    """A fresh P-256 key pair (ephemeral DH keys and certificate keys alike)."""
    return ECC.generate(curve="P-256")


def public_bytes(key: EccKey) -> bytes:
    """The 64-byte wire form ``X ‖ Y`` of a key's public point."""
    point = key.pointQ
    return int(point.x).to_bytes(32, "big") + int(point.y).to_bytes(32, "big")


#: The prime of P-256's field: a coordinate is a number below it.
_FIELD_PRIME = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF


def load_public_key(data: bytes) -> EccKey:
    """Parse a 64-byte wire public key (a peer's, from the network, or a trusted one).

    Raises :class:`BadValue` for a point off the curve, for the point at infinity (which PyCryptodome builds from
    ``(0, 0)``: as a peer's ECDH key it leaves no secret) and for a coordinate of the field prime or more (which
    PyCryptodome reduces: a second spelling of a key, and ``(p, 0)`` is infinity again).
    """
    if len(data) != 64:
        raise BadValue(f"public key must be 64 bytes, got {len(data)}")
    x, y = int.from_bytes(data[:32], "big"), int.from_bytes(data[32:], "big")
    if x >= _FIELD_PRIME or y >= _FIELD_PRIME:
        raise BadValue("public key is not a point on P-256: a coordinate is not below the field prime")
    if x == 0 and y == 0:
        raise BadValue("public key is the point at infinity (all zero), not a point on P-256")
    try:
        key = ECC.construct(curve="P-256", point_x=x, point_y=y)
    except ValueError:
        raise BadValue("public key is not a point on P-256") from None
    if key.pointQ.is_point_at_infinity():  # (0, 0) above is its only spelling today; refuse any other as well
        raise BadValue("public key is the point at infinity, not a point on P-256")
    return key


def ecdh(private: EccKey, peer_public: EccKey) -> bytes:
    """The ECDH result: X coordinate of ``d × Q``, 32 bytes big-endian (spec §4.3 step 3)."""
    if not private.has_private():
        raise ConfigError("ECDH needs a private key")
    point = peer_public.pointQ * private.d
    if point.is_point_at_infinity():
        raise BadValue("ECDH result is the point at infinity")
    return int(point.x).to_bytes(32, "big")


def derive_session_key(x: bytes) -> bytes:
    """AES-128 key = first 16 bytes of SHA-1 of the ECDH result (spec §4.3 step 4)."""
    return hashlib.sha1(x).digest()[:16]


def tag_for(x: bytes, q_client: bytes, q_host: bytes) -> bytes:
    """HMAC-SHA256 keyed with the raw ECDH result over both public keys (spec §4.3 step 5)."""
    return hmac.new(x, q_client + q_host, hashlib.sha256).digest()


def sign_host_key(certificate: EccKey, q_host: bytes) -> bytes:
    """ECDSA-P256-SHA256 over the 64 raw bytes of the host key, DER-encoded (spec §4.3 step 6)."""
    if not certificate.has_private():
        raise ConfigError("signing the host key needs the certificate's private key")
    return DSS.new(certificate, "fips-186-3", encoding="der").sign(SHA256.new(q_host))


def verify_host_key(certificate: EccKey, q_host: bytes, signature: bytes) -> None:
    """Check the host-key signature: DER first, then raw ``r ‖ s``; over ``Q`` then ``04 ‖ Q`` (spec §4.3)."""
    pub = certificate.public_key()
    for encoding in ("der", "binary"):
        for message in (q_host, b"\x04" + q_host):
            try:
                DSS.new(pub, "fips-186-3", encoding=encoding).verify(SHA256.new(message), signature)
            except ValueError:
                continue
            return
    raise AuthenticationError("host key signature does not verify with the trusted certificate key")


@attrs.frozen
class HostHello:
    """The CONNECT+ACK payload of the Rendez-Vous variant (spec §4.2)."""

    signature: bytes = attrs.field(repr=bytes.hex)
    host_public: bytes = attrs.field(repr=bytes.hex)
    tag: bytes = attrs.field(repr=bytes.hex)

    def encode(self) -> bytes:
        if len(self.host_public) != 64:
            raise ConfigError("host public key must be 64 bytes")
        w = Writer()
        w.u32_le(len(self.signature))
        w.bytes(self.signature)
        w.bytes(self.host_public)
        w.u32_le(len(self.tag))
        w.bytes(self.tag)
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes) -> HostHello:
        r = Reader(data)
        sig = r.bytes(r.u32_le("signature length"), "signature")
        host = r.bytes(64, "host public key")
        tag = r.bytes(r.u32_le("tag length"), "tag")
        r.expect_end("CONNECT+ACK payload")
        return cls(sig, host, tag)


def host_accept(client_public: bytes, certificate: EccKey, host_key: EccKey | None = None) -> tuple[HostHello, bytes]:
    """Host side: answer a client key; return the CONNECT+ACK payload value and the AES key.

    Raises:
        BadValue: the client's key is malformed, not on the curve or the point at infinity.
    """
    peer = load_public_key(client_public)
    mine = host_key if host_key is not None else generate_key()
    q_host = public_bytes(mine)
    x = ecdh(mine, peer)
    hello = HostHello(sign_host_key(certificate, q_host), q_host, tag_for(x, client_public, q_host))
    return hello, derive_session_key(x)


def client_finish(client_key: EccKey, hello: HostHello, certificate: EccKey) -> bytes:
    """Client side: check the host's answer and return the AES key.

    Raises:
        AuthenticationError: wrong certificate or signature ("host key signature ...") or
            wrong tag ("key-exchange tag ...").
        BadValue: the host key is malformed, off the curve or the point at infinity.
    """
    host = load_public_key(hello.host_public)  # the key itself first: even signed, infinity is no key
    verify_host_key(certificate, hello.host_public, hello.signature)
    x = ecdh(client_key, host)
    expected = tag_for(x, public_bytes(client_key), hello.host_public)
    if not hmac.compare_digest(expected, hello.tag):
        raise AuthenticationError("key-exchange tag does not match: the host did not derive the same ECDH result")
    return derive_session_key(x)
