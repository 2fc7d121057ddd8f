"""Input and output shapes of the API. No logic beyond checking shapes."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from rest_framework import serializers

from sessions.ids import is_valid_id
from sessions.log import format_time
from sessions.models import Session
from sessions.services.session import has_control_characters


class TextField(serializers.CharField):
    """A string, and only a string: DRF's ``CharField`` turns ``123`` or ``1.5`` into
    ``"123"``, so ``{"text": 123}`` was a prompt and ``{"title": 7}`` a title, where a
    client that sent a number has a bug it should hear of."""

    default_error_messages = {"invalid": "Not a valid string: send a JSON string."}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class SessionSerializer(serializers.ModelSerializer):
    parent_id = serializers.CharField(read_only=True, allow_null=True)
    agent = serializers.SerializerMethodField()
    created_at = serializers.SerializerMethodField()
    updated_at = serializers.SerializerMethodField()
    status = serializers.SerializerMethodField()

    class Meta:
        model = Session
        fields = ["id", "title", "agent", "parent_id", "created_at", "updated_at", "status"]
        read_only_fields = fields

    def get_agent(self, obj: Session) -> str | None:
        return obj.agent or None

    def get_created_at(self, obj: Session) -> str:
        return format_time(obj.created_at)

    def get_updated_at(self, obj: Session) -> str:
        return format_time(obj.updated_at)

    def get_status(self, obj: Session) -> str:
        return "busy" if getattr(obj, "busy", False) else "idle"


class SessionDetailSerializer(SessionSerializer):
    """``GET /api/sessions/{id}/`` (documentation): the session and the tool calls of it
    that wait for an answer (docs/approvals.md)."""

    pending_approvals = serializers.ListField(child=serializers.DictField(), read_only=True)

    class Meta(SessionSerializer.Meta):
        fields = [*SessionSerializer.Meta.fields, "pending_approvals"]
        read_only_fields = fields


class LineField(TextField):
    """One line of text: no control characters (the log refuses them in a title or an
    agent's name; refused here, the field is named, as every other bad field is)."""

    default_error_messages = {"control": "Control characters are not allowed here."}

    def to_internal_value(self, data: Any) -> str:
        text = super().to_internal_value(data)
        if has_control_characters(text):
            self.fail("control")
        return text


class SessionCreateSerializer(serializers.Serializer):
    title = LineField(max_length=255, required=False, allow_blank=True, default="")
    agent = LineField(max_length=64, required=False, allow_null=True, default=None)


class SessionUpdateSerializer(serializers.Serializer):
    title = LineField(max_length=255, required=False, allow_blank=True)
    agent = LineField(max_length=64, required=False, allow_null=True)


class FileSerializer(serializers.Serializer):
    """A JSON attachment: its name, its type, and its bytes in base64."""

    filename = TextField(max_length=255)
    mime = TextField(max_length=255, required=False, allow_blank=True, default="")
    # An empty file is a file, as a multipart upload of one is (QA: refused as blank).
    content = TextField(allow_blank=True, help_text="the file's bytes, base64")

    def validate_content(self, value: str) -> bytes:
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("not valid base64") from None


class PromptSerializer(serializers.Serializer):
    text = TextField(trim_whitespace=False)
    agent = TextField(max_length=64, required=False, allow_null=True, default=None)
    files = FileSerializer(many=True, required=False, default=list)


class ForkSerializer(serializers.Serializer):
    message_id = TextField(max_length=64)

    def validate_message_id(self, value: str) -> str:
        if not is_valid_id(value):
            raise serializers.ValidationError("not a message id")
        return value


def page_body(
    results: list[Any], next_url: str | None, previous_url: str | None = None
) -> dict[str, Any]:
    return {"results": results, "next": next_url, "previous": previous_url}


class ApprovalSerializer(serializers.Serializer):
    """``POST /api/sessions/{id}/approvals/{call_id}/`` (documentation: the view checks
    the shape strictly, a boolean ``approve`` and no string for it)."""

    approve = serializers.BooleanField()
    reason = TextField(required=False, allow_blank=True, max_length=2000)
