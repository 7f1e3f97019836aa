"""The test provider's people. Each has a password, groups, an e-mail, whether the provider says
that e-mail is verified, and the preferred_username it sends (None: the claim is left out, as
some providers do), so the tests can play identities that try to land in someone else's
account."""

PASSWORD = "acme-pass"
USERS = {
    # username: first, last, groups, e-mail, email_verified, preferred_username
    "dana": ("Dana", "Okafor", ["gpu-vision-leads", "research-managers"], "dana@acme.example",
             True, "dana"),
    "erin": ("Erin", "Silva", ["gpu-nlp", "finance-team"], "erin@acme.example", True, "erin"),
    # Chooses the name of the portal's platform admin.
    "admin": ("Mallory", "Admin", [], "admin@anything.example", True, "admin"),
    # Sends no preferred_username and an e-mail whose local part is "admin", not verified.
    "mallory": ("Mallory", "Nobody", [], "admin@evil.example", False, None),
    # Claim the e-mail of the portal's alice: verified by the provider, and not.
    "alice-sso": ("Alice", "Verified", ["gpu-vision"], "alice@example.org", True, "alice"),
    "eve": ("Eve", "Unverified", [], "alice@example.org", False, "eve"),
}  # fmt: skip


def claims_of(username: str) -> dict:
    """The profile and e-mail claims the provider sends for one of its users."""
    first, last, _groups, email, verified, preferred = USERS[username]
    claims = {
        "given_name": first, "family_name": last, "name": f"{first} {last}",
        "email": email, "email_verified": verified,
    }  # fmt: skip
    if preferred is not None:
        claims["preferred_username"] = preferred
    return claims
