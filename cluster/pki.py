"""Certificates and keys of the local control plane: a cluster CA, a front-proxy CA, serving
certificates for the API server and each webhook server on loopback, client certificates per
component, and the service-account signing key. Made once per state directory and kept."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=3650)
LOOPBACK_NAMES = ("localhost", "127.0.0.1")
# The API server's own names inside the cluster, and the first address of the service range.
API_SERVER_NAMES = (
    *LOOPBACK_NAMES,
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "10.96.0.1",
)


@dataclass(frozen=True)
class Pair:
    """A certificate and its key on disk."""

    cert: Path
    key: Path


def _new_key(use_rsa: bool = False):
    if use_rsa:
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key) -> None:
    # RSA keys in PKCS#1 ("RSA PRIVATE KEY"), the only form some certificate rotators read.
    form = (
        serialization.PrivateFormat.TraditionalOpenSSL
        if isinstance(key, rsa.RSAPrivateKey)
        else serialization.PrivateFormat.PKCS8
    )
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _still_valid(cert_path: Path, ca: Pair, server_names: tuple[str, ...]) -> bool:
    """Whether a certificate on disk was signed by ca and names what it serves (a CA made again,
    or a name added, makes it stale)."""
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert.read_bytes()))
    except (ValueError, TypeError, InvalidSignature, OSError):
        return False
    if not server_names:
        return True
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return names == _sans(server_names)


def _load_key(path: Path):
    return serialization.load_pem_private_key(path.read_bytes(), password=None)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def _sans(names) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    """A CA signs certificates; a leaf signs handshakes (and, with RSA, enciphers keys)."""
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=ca,
        crl_sign=ca,
        key_encipherment=not ca,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def ensure_ca(
    directory: Path, name: str, common_name: str, *, dns_name: str = "", use_rsa: bool = False
) -> Pair:
    """A self-signed CA, made unless it exists; dns_name, when given, as its subject alternative
    name (a certificate rotator that checks a CA by name needs one)."""
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = _new_key(use_rsa)
    subject = _name(common_name)
    builder = _builder(subject, subject, key.public_key())
    if dns_name:
        builder = builder.add_extension(_sans([dns_name]), critical=False)
    cert = (
        builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write_key(pair.key, key)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def ensure_cert(
    directory: Path,
    name: str,
    ca: Pair,
    *,
    common_name: str,
    organization: str | None = None,
    server_names: tuple[str, ...] = (),
    client: bool = False,
) -> Pair:
    """A certificate signed by ca (serving when server_names, client when client), made unless
    it exists."""
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    if pair.key.exists() and _still_valid(pair.cert, ca, server_names):
        return pair
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = _load_key(ca.key)
    key = _new_key(isinstance(ca_key, rsa.RSAPrivateKey))
    usages = []
    if server_names:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        _builder(_name(common_name, organization), ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server_names:
        builder = builder.add_extension(_sans(server_names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write_key(pair.key, key)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return pair


def ensure_signing_key(directory: Path, name: str) -> Pair:
    """The service-account token signing key (private) and its public half."""
    pair = Pair(directory / f"{name}.pub", directory / f"{name}.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = _new_key()
    _write_key(pair.key, key)
    pair.cert.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pair


def install_serving_dir(pair: Pair, directory: Path) -> Path:
    """A directory holding the pair as tls.crt and tls.key (controller-runtime's names)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(pair.cert.read_bytes())
    key = directory / "tls.key"
    key.write_bytes(pair.key.read_bytes())
    key.chmod(0o600)
    return directory
