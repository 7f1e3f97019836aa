from django.urls import path

from queues import views

urlpatterns = [
    path("", views.home, name="home"),
    path("teams/", views.team_list, name="team-list"),
    path("teams/<slug:slug>/", views.team_detail, name="team-detail"),
    path("profile/", views.profile, name="profile"),
    path("profile/tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
]
