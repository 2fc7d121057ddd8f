"""The browser chat page."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie


@login_required
@ensure_csrf_cookie
def chat(request: HttpRequest) -> HttpResponse:
    from forge.runtime.prompting import MAX_FILE_BYTES, MAX_FILES

    limits = {
        "max_prompt_bytes": settings.FORGE_MAX_PROMPT_BYTES,
        "max_files": MAX_FILES,
        "max_file_bytes": MAX_FILE_BYTES,
    }
    return render(request, "chat.html", limits)
