"""The chat route's request bodies (``useChat``'s ``DefaultChatTransport``): each shape
checked before anything is written; a bad one is a ``ValidationError`` (400)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from rest_framework.exceptions import ValidationError

from forge import runtime
from sessions.ids import is_valid_id

TRIGGERS = ("submit-message", "regenerate-message")
_DATA_URL = re.compile(r"data:([^;,]*)(;[^,]*)?,(.*)", re.DOTALL)


def chat_request(body: Any) -> tuple[dict[str, Any], str, str]:
    """``(body, chat id, trigger)`` of a chat request; raises ``ValidationError``."""
    if not isinstance(body, dict):
        raise ValidationError({"body": "send a JSON object: {id, messages, trigger}"})
    chat_id = checked_chat_id(body.get("id"))
    trigger = body.get("trigger", "submit-message")
    if trigger not in TRIGGERS:
        raise ValidationError({"trigger": f"one of {', '.join(TRIGGERS)}"})
    return body, chat_id, trigger


def checked_chat_id(chat_id: Any) -> str:
    """A chat id as the routes take it (the body's ``id``, the path's): 400 for what can
    never name a chat. The resume route answered 204 for ``bad id!`` as for a chat not
    created yet, which it can never be."""
    if not isinstance(chat_id, str) or not is_valid_id(chat_id):
        raise ValidationError({"id": "a chat id is 1 to 64 letters, digits, '_' or '-'"})
    return chat_id


def regenerated_id(body: dict[str, Any]) -> str | None:
    """The ``messageId`` of a regenerate request (None: the last reply), checked."""
    message_id = body.get("messageId")
    if message_id is not None and (not isinstance(message_id, str) or not is_valid_id(message_id)):
        raise ValidationError({"messageId": "the id of the message to regenerate, or none"})
    return message_id


def names_last_user_message(body: dict[str, Any], message_id: str) -> bool:
    """Whether ``message_id`` is the id of the last user message of the client's
    ``messages`` (``regenerate({messageId})`` cuts them there, after that message).

    When the chat has no message of that id, it is one a live client made for its
    user message (the server logs it under its own and says so nowhere): the reply
    to it is the last reply. The view asks the log first: an id the chat has is
    judged by the runtime, so naming an earlier prompt after a reload is a 409, not
    the last reply regenerated (QA MEDIUM: the client then showed the newest answer
    under the first question)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return False
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    return bool(users) and users[-1].get("id") == message_id


def edited_id(body: dict[str, Any]) -> str | None:
    """The ``messageId`` of a submit that names its own (last) message: the AI SDK's
    ``sendMessage({text, messageId})``, which replaces that message client-side (an
    edit), or ``sendMessage()`` sending the last message again. None otherwise."""
    message_id = body.get("messageId")
    messages = body.get("messages")
    if not isinstance(message_id, str) or not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    return message_id if isinstance(last, dict) and last.get("id") == message_id else None


def prompt_of(body: dict[str, Any]) -> tuple[str, list[runtime.Attachment]]:
    """``(text, files)`` of a submitted message: the last of ``messages``."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValidationError({"messages": "send the chat's messages, the new one last"})
    last = messages[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        raise ValidationError({"messages": "the last message must be the user's new message"})
    parts = last.get("parts")
    if not isinstance(parts, list):
        raise ValidationError({"messages": "the last message has no parts"})
    texts: list[str] = []
    files: list[runtime.Attachment] = []
    for part in parts:
        if not isinstance(part, dict):
            raise ValidationError({"messages": "a part must be an object"})
        if part.get("type") == "text":
            if not isinstance(part.get("text"), str):
                raise ValidationError({"messages": "a text part needs a string 'text'"})
            texts.append(part["text"])
        elif part.get("type") == "file":
            files.append(attachment(part, len(files)))
        # Other parts of a user message (data-*, step-start, …) carry no prompt.
    return "\n\n".join(texts), files


def attachment(part: dict[str, Any], index: int) -> runtime.Attachment:
    url = part.get("url")
    match = _DATA_URL.fullmatch(url) if isinstance(url, str) else None
    if match is None or match.group(2) is None or "base64" not in match.group(2):
        raise ValidationError({"messages": "file parts must be base64 data: URLs"})
    try:
        content = base64.b64decode(match.group(3), validate=True)
    except (binascii.Error, ValueError):
        raise ValidationError({"messages": "a file part's data: URL is not base64"}) from None
    filename, media_type = part.get("filename"), part.get("mediaType")
    # A wrong type is refused, not replaced: a mediaType of 5 was logged as no type.
    if filename is not None and not isinstance(filename, str):
        raise ValidationError({"messages": "a file part's filename must be a string"})
    if media_type is not None and not isinstance(media_type, str):
        raise ValidationError({"messages": "a file part's mediaType must be a string"})
    return runtime.Attachment(
        filename=filename or f"file-{index + 1}",
        content=content,
        mime=media_type or match.group(1) or "",
    )
