"""Which 64-byte P-256 public keys the Rendez-Vous key exchange takes (spec ../shared/spec/prudp.md §4.2-§4.3).

PyCryptodome builds the point at infinity from the coordinates (0, 0), and takes a coordinate one field prime
too big as the same point as the reduced one.  Neither is a key a peer may send: the identity point makes every
ECDH result the same (no secret at all), and a second spelling of the same key makes the bytes that the tag and
signature cover differ from the point they stand for.  Both are refused as the key's own :class:`BadValue`, the
error an off-curve point gets, wherever a key comes in: the client's CONNECT, the host's CONNECT+ACK, ``--trust``.
"""

from __future__ import annotations

import pytest
from Crypto.PublicKey import ECC

from protocols.errors import BadValue, DecodeError
from protocols.prudp.rendezvous import (
    HostHello,
    client_finish,
    generate_key,
    host_accept,
    load_public_key,
    public_bytes,
    sign_host_key,
    tag_for,
)

#: The field prime of P-256.
P = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
#: A point of P-256 with a small X (5), so that X + P still fits the 32 bytes of the wire form.
SMALL_X, SMALL_Y = 5, 0x459243B9AA581806FE913BCE99817ADE11CA503C64D9A3C533415C083248FBCC

INFINITY = bytes(64)


def _wire(x: int, y: int) -> bytes:
    return x.to_bytes(32, "big") + y.to_bytes(32, "big")


def test_the_small_point_is_on_the_curve_and_its_unreduced_spelling_fits_the_wire_form() -> None:
    """The vectors below are what they claim: (5, Y) is a key, and X + P is a second 32-byte spelling of it."""
    key = load_public_key(_wire(SMALL_X, SMALL_Y))
    assert public_bytes(key) == _wire(SMALL_X, SMALL_Y)
    assert SMALL_X + P < 2**256 and P - SMALL_Y < 2**256
    # PyCryptodome on its own takes the unreduced X: the check has to be ours
    assert int(ECC.construct(curve="P-256", point_x=SMALL_X + P, point_y=SMALL_Y).pointQ.x) == SMALL_X


def test_the_point_at_infinity_is_not_a_public_key() -> None:
    with pytest.raises(BadValue, match="point at infinity"):
        load_public_key(INFINITY)


@pytest.mark.parametrize(
    ("x", "y"),
    [(SMALL_X + P, SMALL_Y), (P, 0), (0, P), (P, P)],
    ids=["x+p", "(p,0)", "(0,p)", "(p,p)"],
)
def test_a_coordinate_of_the_field_prime_or_more_is_refused(x: int, y: int) -> None:
    """(p, 0), (0, p) and (p, p) reduce to the point at infinity; x + p to a real point by another name."""
    with pytest.raises(BadValue, match="P-256"):
        load_public_key(_wire(x, y))


def test_an_off_curve_point_is_still_refused_the_same_way() -> None:
    with pytest.raises(BadValue, match="not a point on P-256"):
        load_public_key(_wire(SMALL_X, SMALL_Y + 1))


@pytest.mark.parametrize("client", [INFINITY, _wire(SMALL_X + P, SMALL_Y)], ids=["infinity", "unreduced"])
def test_the_host_refuses_such_a_client_key_as_a_bad_key(client: bytes) -> None:
    """The client's key arrives in its CONNECT: the host names the key, not a later ECDH step, and answers nothing."""
    with pytest.raises(BadValue, match="public key"):
        host_accept(client, generate_key())


@pytest.mark.parametrize("host", [INFINITY, _wire(SMALL_X + P, SMALL_Y)], ids=["infinity", "unreduced"])
def test_the_client_refuses_such_a_host_key_even_when_it_is_signed(host: bytes) -> None:
    """The host's key arrives in its CONNECT+ACK.  Even signed by the trusted certificate (a host that misbehaves,
    or a stolen certificate key), it is refused as a bad key: it would give a session key anyone can compute."""
    certificate, client = generate_key(), generate_key()
    hello = HostHello(sign_host_key(certificate, host), host, tag_for(bytes(32), public_bytes(client), host))
    decoded = HostHello.decode(hello.encode())  # as it comes off the wire
    with pytest.raises(BadValue, match="public key"):
        client_finish(client, decoded, certificate)


def test_refusals_stay_in_the_decode_error_family() -> None:
    for data in (INFINITY, _wire(P, 0), _wire(SMALL_X + P, SMALL_Y), bytes(63)):
        with pytest.raises(DecodeError):
            load_public_key(data)


def test_real_keys_still_load_and_agree() -> None:
    certificate, client = generate_key(), generate_key()
    hello, host_aes = host_accept(public_bytes(client), certificate)
    assert client_finish(client, HostHello.decode(hello.encode()), certificate) == host_aes
