from django.db import migrations, models
from django.db.models import Count


def count_calls(apps, schema_editor):
    """Start each agent's count from the calls it has, so no call already in a window is forgotten."""
    McpRateCount = apps.get_model("rewind", "McpRateCount")
    McpRateCall = apps.get_model("rewind", "McpRateCall")
    for row in McpRateCall.objects.values("key").annotate(n=Count("id")):
        McpRateCount.objects.filter(key=row["key"]).update(calls=row["n"])


class Migration(migrations.Migration):
    dependencies = [
        ("rewind", "0027_credentials_version"),
    ]

    operations = [
        migrations.AddField(
            model_name="mcpratecount",
            name="calls",
            field=models.IntegerField(default=0, help_text="The agent's McpRateCall rows"),
        ),
        migrations.RunPython(count_calls, migrations.RunPython.noop),
    ]
