"""Web pages of planning, beside queues' quota pages under /quota/: recommendations and what-if."""

from django.urls import path

from planning.views import recommendations, whatif

urlpatterns = [
    path(
        "quota/recommendations/",
        recommendations.recommendations,
        name="quota-recommendations",
    ),
    path("quota/whatif/", whatif.whatif_list, name="quota-whatif"),
    path("quota/whatif/<int:pk>/", whatif.whatif_detail, name="quota-whatif-detail"),
    path("quota/whatif/<int:pk>/apply/", whatif.whatif_apply, name="quota-whatif-apply"),
]
