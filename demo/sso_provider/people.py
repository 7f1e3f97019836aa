"""The demo provider's people and client, and the role map the portal reads them with
(`make run SSO=1` passes it as OIDC_ROLE_MAP). Importable without Django set up."""

import json

CLIENT_ID = "quartermaster-demo"
CLIENT_SECRET = "demo-sso-client-secret"  # demo data: published on purpose
PASSWORD = "quartermaster"
# username: (first name, last name, provider groups, what the portal makes of them)
PEOPLE = {
    "grace": ("Grace", "Hopper", ["gpu-vision"], "researcher in vision"),
    "henry": ("Henry", "Nlp", ["gpu-nlp-leads"], "lead of nlp"),
    "ines": ("Ines", "Manager", ["research-managers"], "manager of Research"),
    "jules": ("Jules", "Ledger", ["finance-team"], "finance"),
    "kim": ("Kim", "Ops", ["platform-ops"], "platform admin"),
}
# provider group -> the portal's grants (README: OIDC_ROLE_MAP)
ROLE_MAP = {
    "gpu-vision": "team:vision:member",
    "gpu-nlp-leads": "team:nlp:lead",
    "research-managers": "manager:research",
    "finance-team": "finance",
    "platform-ops": "platform-admin",
}


if __name__ == "__main__":  # the Makefile reads the map from here
    print(json.dumps(ROLE_MAP, separators=(",", ":")))
