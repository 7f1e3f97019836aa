"""URL routes (filled by the issue that owns this module)."""

urlpatterns = []
