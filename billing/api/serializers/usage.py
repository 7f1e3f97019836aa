"""API shapes for usage: the query of the usage summary."""

from rest_framework import serializers


class UsageQuerySerializer(serializers.Serializer):
    team = serializers.SlugField(max_length=63)
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()

    def validate(self, attrs):
        if attrs["end"] <= attrs["start"]:
            raise serializers.ValidationError({"end": ["The end must be after the start."]})
        if (attrs["end"] - attrs["start"]).days > 400:
            raise serializers.ValidationError({"end": ["Ask for at most 400 days at a time."]})
        return attrs
