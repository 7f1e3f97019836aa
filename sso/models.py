"""Who an account is at the identity provider: the (issuer, subject) pair it is bound to."""

from django.conf import settings
from django.db import models


class Identity(models.Model):
    """A provider's account bound to a portal account. The provider's `sub` never changes and
    is never reused, unlike a username or an e-mail the user can change there, so it is the
    only thing a sign-in is matched by once bound."""

    class Linked(models.TextChoices):
        CREATED = "created", "account created at first sign-in"
        VERIFIED_EMAIL = "verified-email", "existing account linked by a verified e-mail"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identities"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    linked = models.CharField(max_length=20, choices=Linked.choices)
    # What the provider last said, for admins; never used to find the account.
    email = models.CharField(max_length=254, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_sign_in_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_subject"),
            models.UniqueConstraint(fields=["issuer", "user"], name="sso_identity_one_per_user"),
        ]

    def __str__(self):
        return f"{self.subject} at {self.issuer}"
