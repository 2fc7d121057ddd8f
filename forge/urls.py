from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularSwaggerView

from forge import pages, views
from forge.api.schema_view import SchemaView
from forge.login_guard import LoginForm
from forge.telemetry.endpoint import metrics

urlpatterns = [
    path("", pages.chat, name="chat"),
    path("admin/", admin.site.urls),
    path("", include("forge.aisdk.urls")),
    path("api/", include("forge.api.urls")),
    path("api/schema/", SchemaView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="login.html", authentication_form=LoginForm),
        name="login",
    ),
    path("metrics", metrics, name="metrics"),
    path("logout/", auth_views.LogoutView.as_view(next_page="login"), name="logout"),
    # Last: any other path under /api/ is a JSON 404 whatever DEBUG says (handler404
    # below is skipped under DEBUG, which answered Django's HTML page under make run).
    re_path(r"^api/", views.api_not_found),
]

handler404 = "forge.views.not_found"
handler500 = "forge.views.server_error"
