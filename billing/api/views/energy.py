"""API of the energy settings: the site's PUE and constant carbon intensity (finance and admins
read, platform admins set) and the hourly carbon intensity series upload (platform admins)."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.forms.energy import MAX_UPLOAD_BYTES
from billing.models import EnergySettings
from billing.permissions import can_manage_billing
from billing.selectors.energy import carbon_series_summary
from billing.services.energy import carbon_series_upload, energy_settings_update
from core.roles import is_platform_admin


class EnergySettingsSerializer(serializers.Serializer):
    pue = serializers.DecimalField(max_digits=4, decimal_places=2, min_value=1, max_value=5)
    grams_per_kwh = serializers.DecimalField(
        max_digits=7, decimal_places=1, min_value=0, allow_null=True, required=False
    )


def _settings_out(site: EnergySettings) -> dict:
    return {
        "pue": str(site.pue),
        "grams_per_kwh": None if site.grams_per_kwh is None else str(site.grams_per_kwh),
        "series": {
            k: (v.isoformat() if hasattr(v, "isoformat") else v)
            for k, v in carbon_series_summary().items()
        },
    }


class EnergySettingsView(APIView):
    """The PUE and the constant carbon intensity (gCO2e/kWh; null: none) and the uploaded
    series' extent. Finance and admins read; platform admins set (PUT)."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request):
        if not can_manage_billing(request.user):
            raise PermissionDenied("Only finance and platform admins see the energy settings.")
        return Response(_settings_out(EnergySettings.current()))

    @extend_schema(request=EnergySettingsSerializer, responses=OpenApiTypes.OBJECT)
    def put(self, request):
        if not is_platform_admin(request.user):
            raise PermissionDenied("Only platform admins set the PUE and the carbon intensity.")
        serializer = EnergySettingsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        site = energy_settings_update(
            actor=request.user, pue=data["pue"], grams_per_kwh=data.get("grams_per_kwh")
        )
        return Response(_settings_out(site))


class CarbonSeriesUploadView(APIView):
    """Upload an hourly carbon intensity series: a CSV of `hour_start,grams_per_kwh` lines, as
    the multipart field `file` or the JSON body {"csv": "<the text>"}. All or nothing; 400
    lists every bad line."""

    parser_classes = [MultiPartParser, JSONParser]

    @extend_schema(
        request={
            "multipart/form-data": {"type": "object",
                                    "properties": {"file": {"type": "string", "format": "binary"}}},
            "application/json": {"type": "object", "properties": {"csv": {"type": "string"}}},
        },
        responses=OpenApiTypes.OBJECT,
    )  # fmt: skip
    def post(self, request):
        if not is_platform_admin(request.user):
            raise PermissionDenied("Only platform admins upload the carbon intensity series.")
        upload = request.FILES.get("file")
        text = request.data.get("csv") if isinstance(request.data, dict) else None
        if upload is not None:
            size, read = upload.size, upload.read
        elif isinstance(text, str):
            data = text.encode("utf-8", "surrogatepass")
            size, read = len(data), lambda: data
        else:
            raise ValidationError({"file": ["Attach the CSV as the multipart field `file` or "
                                            'send {"csv": "<the text>"}.']})  # fmt: skip
        if size > MAX_UPLOAD_BYTES:
            raise ValidationError({"file": ["The file is larger than 4 MB: upload it in parts."]})
        hours = carbon_series_upload(actor=request.user, data=read())
        return Response({"hours": hours}, status=status.HTTP_201_CREATED)
