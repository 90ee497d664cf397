"""The parts of a multimodal message's content, as OpenAI's chat format has them: text and images
(``Message.content`` may be a list of them on user messages)."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from agentmill_client import limits
from agentmill_client.base import Model

__all__ = ["IMAGE_PLACEHOLDER", "ContentPart", "ImagePart", "ImageUrl", "TextPart"]


class ImageUrl(Model):
    """An image as OpenAI's chat format gives it: an https URL or a ``data:image/…;base64,`` URL.
    Passed to the provider as given (the worker fetches nothing); sizes are bounded where a run is
    submitted (limits.MAX_IMAGE_URL_CHARS, MAX_IMAGE_DATA_BYTES, MAX_RUN_IMAGE_BYTES: 413 beyond)."""

    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None

    @field_validator("url")
    @classmethod
    def _https_or_data(cls, value: str) -> str:
        if value.startswith("data:"):
            if not value.startswith("data:image/") or ";base64," not in value[:100]:
                raise ValueError("a data: URL must be data:image/<type>;base64,<data>")
            return value
        if len(value) > limits.MAX_IMAGE_URL_CHARS:
            raise ValueError(f"an image URL is at most {limits.MAX_IMAGE_URL_CHARS} characters")
        if urlsplit(value).scheme != "https" or not urlsplit(value).hostname:
            raise ValueError("an image URL is https://… or data:image/…")
        return value


class TextPart(Model):
    type: Literal["text"] = "text"
    text: str = Field(max_length=limits.MAX_MESSAGE_CHARS)


class ImagePart(Model):
    type: Literal["image_url"] = "image_url"
    image_url: ImageUrl = Field(alias="image_url")


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]
IMAGE_PLACEHOLDER = "[image]"
