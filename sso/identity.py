"""Which portal account a provider's identity signs in to.

An identity is bound to one account by the provider's (issuer, `sub`) at its first sign-in and
found by that pair ever after. At the first sign-in it gets a new account, named after its
preferred username when that name is free (else with a number added), or, where the operator
allows it (OIDC_LINK_VERIFIED_EMAIL), the one existing account whose e-mail the provider says it
verified. Nothing the user can choose at the provider (a username, an unverified e-mail) ever
selects an existing account.
"""

from __future__ import annotations

import logging
import re

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.utils import timezone

from sso.models import Identity

log = logging.getLogger(__name__)

USERNAME_RE = re.compile(r"[^\w.@+-]")
USERNAME_MAX = 150


def email_verified(claims: dict) -> bool:
    """Whether the provider vouches for the e-mail (some send the flag as a string)."""
    flag = claims.get("email_verified")
    return flag is True or (isinstance(flag, str) and flag.strip().lower() == "true")


def identity_user(*, issuer: str, claims: dict):
    """(account, created) for the identity the claims describe (they carry `sub`)."""
    subject = str(claims["sub"])
    email = str(claims.get("email") or "")[:254]
    try:
        with transaction.atomic():
            identity = (
                Identity.objects.select_for_update()
                .select_related("user")
                .filter(issuer=issuer, subject=subject)
                .first()
            )
            if identity is not None:
                Identity.objects.filter(pk=identity.pk).update(
                    email=email, last_sign_in_at=timezone.now()
                )
                return identity.user, False
            return _first_sign_in(issuer=issuer, subject=subject, email=email, claims=claims)
    except IntegrityError:
        # The same identity's first sign-in raced in from another tab: that one bound it.
        identity = Identity.objects.select_related("user").get(issuer=issuer, subject=subject)
        return identity.user, False


def _first_sign_in(*, issuer, subject, email, claims):
    from queues.services.audit import audit

    user = _verified_email_account(issuer=issuer, email=email, claims=claims)
    linked = Identity.Linked.VERIFIED_EMAIL if user is not None else Identity.Linked.CREATED
    if user is None:
        user = get_user_model().objects.create_user(_free_username(claims), email=email)
        user.set_unusable_password()
        user.save(update_fields=["password"])
    Identity.objects.create(user=user, issuer=issuer, subject=subject, linked=linked,
                            email=email, last_sign_in_at=timezone.now())  # fmt: skip
    if linked == Identity.Linked.VERIFIED_EMAIL:
        audit(actor=user, verb="sso.link", obj=user,
              message=f"Linked to the identity {subject} at {issuer} by the e-mail {email}, "
              "which the provider verified.",
              after={"issuer": issuer, "subject": subject, "email": email})  # fmt: skip
    return user, linked == Identity.Linked.CREATED


def _verified_email_account(*, issuer, email, claims):
    """The one account with the e-mail not yet bound to this provider, when the operator allows
    linking by it and the provider verified it; None otherwise. Several: refused, not guessed."""
    if not (settings.OIDC_LINK_VERIFIED_EMAIL and email and email_verified(claims)):
        return None
    accounts = list(
        get_user_model()
        .objects.filter(email__iexact=email)
        .exclude(sso_identities__issuer=issuer)[:2]
    )
    if len(accounts) > 1:
        raise SuspiciousOperation(
            f"Several accounts have the e-mail {email}: an admin links the right one."
        )
    return accounts[0] if accounts else None


def _free_username(claims: dict) -> str:
    """The preferred username (else the e-mail's local part) when no account has it, else with
    the first free number added: `admin` at the provider never becomes the local `admin`."""
    wanted = claims.get("preferred_username") or str(claims.get("email") or "").split("@")[0]
    base = USERNAME_RE.sub("", str(wanted))[: USERNAME_MAX - 8] or "user"
    taken = get_user_model().objects.filter(username__istartswith=base)
    names = {name.lower() for name in taken.values_list("username", flat=True)}
    if base.lower() not in names:
        return base
    number = 2
    while f"{base}-{number}".lower() in names:
        number += 1
    return f"{base}-{number}"
