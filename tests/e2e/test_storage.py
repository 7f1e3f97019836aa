"""Browser journeys for team data: a lead creates a volume and sets a secret on the team's
"Volumes and secrets" page (mistakes shown on the form, the secret's value never shown again);
a researcher mounts the volume and reads the secret in a job from the job form, sees them in
the live preview, and is told what to fix when naming a volume the team does not have."""

import time

from playwright.sync_api import expect

from queues.models import Job, TeamVolume
from queues.services.reconcile import cluster_check_drift, cluster_reconcile
from tests.e2e.conftest import open_section
from tests.factories import PASSWORD


def _bound(sim, team, name):
    """Reconcile (a worker's job), wait for kubesim to bind the claim, read its status back."""
    cluster_reconcile(cluster_id=sim["cluster"].pk)
    for _ in range(100):
        claim = sim["sim"].kube.get("v1", "PersistentVolumeClaim", name, team.namespace)
        if claim and (claim.get("status") or {}).get("phase") == "Bound":
            break
        time.sleep(0.1)
    cluster_check_drift(cluster_id=sim["cluster"].pk)


def test_a_lead_creates_a_volume_and_a_secret_and_a_researcher_uses_them(page, login, sim_jobs_tx):
    vision = sim_jobs_tx["vision"]
    login("bob", PASSWORD)
    page.goto(f"/teams/{vision.slug}/")
    page.get_by_role("link", name="Volumes and secrets").click()
    volume_form = page.get_by_test_id("volume-form")
    volume_form.get_by_label("Name", exact=True).fill("Data Sets")
    volume_form.get_by_label("Size (GiB)").fill("50")
    volume_form.get_by_role("button", name="Create volume").click()
    expect(page.get_by_test_id("volume-form").locator(".field-error")).to_contain_text(
        "DNS-1123 label"
    )
    volume_form = page.get_by_test_id("volume-form")
    volume_form.get_by_label("Name", exact=True).fill("datasets")
    volume_form.get_by_label("Storage class").fill("fast")
    volume_form.get_by_role("button", name="Create volume").click()
    expect(page.get_by_test_id("volume-form").locator(".field-error")).to_contain_text(
        "has no StorageClass 'fast' (it has: standard)"
    )
    page.get_by_test_id("volume-form").get_by_label("Storage class").fill("")
    page.get_by_test_id("volume-form").get_by_role("button", name="Create volume").click()
    expect(page.locator(".messages")).to_contain_text("Volume datasets is being created")
    expect(page.locator("[data-volume=datasets] [data-testid=volume-state]")).to_have_text(
        "Creating"
    )
    _bound(sim_jobs_tx, vision, "datasets")
    page.reload()
    expect(page.locator("[data-volume=datasets] [data-testid=volume-state]")).to_have_text("Bound")

    secret_form = page.get_by_test_id("secret-form")
    secret_form.get_by_label("Name", exact=True).fill("wandb")
    secret_form.get_by_label("Values").fill("api-key=s3cr3t-token")
    secret_form.get_by_role("button", name="Save secret").click()
    expect(page.locator(".messages")).to_contain_text("Secret wandb is stored in the cluster")
    row = page.locator("[data-secret=wandb]")
    expect(row).to_contain_text("api-key")
    expect(row.get_by_test_id("secret-state")).to_have_text("as set")
    assert "s3cr3t-token" not in page.content()
    listed = page.request.get("/api/v1/secrets/")
    assert listed.ok and "api-key" in listed.text() and "s3cr3t-token" not in listed.text()
    # The audit log records the change without the value (a platform admin reads it).
    login("admin", PASSWORD)
    page.goto("/quota/audit/")
    expect(page.locator("body")).to_contain_text("secret.create")
    assert "s3cr3t-token" not in page.content()

    # A member sees them and cannot change them; on the job form they are offered by name.
    login("alice", PASSWORD)
    page.goto(f"/teams/{vision.slug}/storage/")
    expect(page.get_by_test_id("volumes")).to_contain_text("datasets")
    expect(page.get_by_test_id("volume-form")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete")).to_have_count(0)
    page.goto("/jobs/new/")
    page.get_by_label("Name", exact=True).fill("reads data")
    page.get_by_label("Image").fill("ghcr.io/acme/train:1.0")
    page.get_by_label("Command").fill("python train.py")
    page.get_by_label("GPUs per worker").fill("1")
    page.get_by_label("Pool").select_option("a100")
    page.get_by_label("Maximum runtime (seconds)").fill("600")
    open_section(page, "Resources and volumes")
    expect(page.get_by_text("Your team's volumes: datasets.")).to_be_visible()
    page.get_by_label("Volumes").fill("nope:/data")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".field-error").first).to_contain_text("no volume named 'nope'")
    page.get_by_label("Volumes").fill("datasets:/data:ro")
    open_section(page, "Arguments and environment")
    page.get_by_label("Environment from secrets").fill("WANDB_API_KEY=wandb/api-key")
    page.get_by_label("CPUs per worker").fill("8")
    page.get_by_label("Memory per worker").fill("64Gi")
    page.get_by_label("Shared memory (/dev/shm)").fill("8Gi")
    preview = page.get_by_test_id("yaml-preview")
    expect(preview).to_contain_text("claimName: datasets")
    expect(preview).to_contain_text("name: wandb")
    expect(preview).to_contain_text("memory: 64Gi")
    page.get_by_role("button", name="Submit job").click()
    expect(page.locator(".messages")).to_contain_text("submitted")
    job = Job.objects.get(name="reads data")
    assert job.volumes == [{"volume": "datasets", "mount_path": "/data", "read_only": True}]
    assert job.secret_env == {"WANDB_API_KEY": {"secret": "wandb", "key": "api-key"}}
    assert (job.cpu_millis, job.memory_mib, job.shm_mib) == (8000, 64 * 1024, 8 * 1024)
    assert TeamVolume.objects.get().name == "datasets"
    page.goto(f"/jobs/{job.pk}/")
    expect(page.get_by_test_id("worker-resources")).to_have_text(
        "8 CPUs, 64Gi memory, /dev/shm 8Gi"
    )
    expect(page.locator(".facts")).to_contain_text("datasets at /data (read-only)")
    expect(page.locator(".facts")).to_contain_text("WANDB_API_KEY from wandb/api-key")


def test_a_member_sees_the_namespaces_guard_rails_on_the_team_page(page, login, sim_jobs_tx):
    cluster_check_drift(cluster_id=sim_jobs_tx["cluster"].pk)
    login("alice", PASSWORD)
    page.goto("/teams/")
    page.get_by_role("link", name="Vision").first.click()
    rails = page.get_by_test_id("guardrails-kubesim")
    expect(rails).to_contain_text("0 / 16")  # GPUs in use / the team's ceiling
    expect(rails).to_contain_text("1 CPU, 2Gi")
    expect(rails).to_contain_text("quartermaster:team:vision")
    expect(page.get_by_role("heading", name="Guard rails of the namespace")).to_be_visible()
