BEAT_SCHEDULE = {
    "refresh-trusted-jwks": {"task": "apps.tenancy.tasks.refresh_trusted_jwks", "schedule": 300.0},
    "resume-onboarding": {"task": "apps.tenancy.tasks.resume_onboarding", "schedule": 60.0},
}
