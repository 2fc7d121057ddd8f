from django.urls import path
from rest_framework.routers import DefaultRouter

from .files import session_file
from .memory import MemoryViewSet
from .sse import stream_view
from .usage import UsageView
from .views import SessionViewSet

router = DefaultRouter(trailing_slash=True)
router.include_root_view = False
router.register("sessions", SessionViewSet, basename="session")

memory_cores = MemoryViewSet.as_view({"get": "cores"})
memory_core = MemoryViewSet.as_view({"get": "core"})
memory_unit = MemoryViewSet.as_view({"get": "unit"})
memory_search = MemoryViewSet.as_view({"get": "search"})

urlpatterns = [
    path("sessions/<str:session_id>/stream/", stream_view, name="session-stream"),
    path("sessions/<str:session_id>/files/<str:part_id>/", session_file, name="session-file"),
    path("memory/cores/", memory_cores, name="memory-cores"),
    path("memory/cores/<str:pk>/", memory_core, name="memory-core"),
    path("memory/units/<str:pk>/", memory_unit, name="memory-unit"),
    path("memory/search/", memory_search, name="memory-search"),
    path("usage/", UsageView.as_view(), name="usage"),
    *router.urls,
]
