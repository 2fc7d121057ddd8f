from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Membership, Tenant
from forge.models import Budget
from forge.usage.budgets import plain, unpriced_warning
from forge.usage.services import KEEP, InvalidBudget, set_budget


class Command(BaseCommand):
    help = (
        "Set the monthly budget of a tenant, or of one user in it: tokens (input + output, "
        "reasoning included) and/or cost a UTC calendar month. 0 for a limit, or --clear, "
        "removes it."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--tenant", required=True, metavar="NAME")
        parser.add_argument("--user", metavar="NAME", help="a user of the tenant")
        parser.add_argument("--monthly-tokens", metavar="N")
        parser.add_argument("--monthly-cost", metavar="X")
        parser.add_argument("--clear", action="store_true", help="remove the budget")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(name=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"no tenant named {options['tenant']!r}")
        user = None
        if options["user"] is not None and not options["user"].strip():
            # (An empty name was taken for none: the tenant's budget was set.)
            raise CommandError("--user must name a user (leave it out for the tenant's budget)")
        if options["user"] is not None:
            membership = (
                Membership.objects.filter(tenant=tenant, user__username=options["user"])
                .select_related("user")
                .first()
            )
            if membership is None:
                raise CommandError(f"no user {options['user']!r} in tenant {tenant.name!r}")
            user = membership.user
        tokens, cost = options["monthly_tokens"], options["monthly_cost"]
        if options["clear"]:
            if tokens is not None or cost is not None:
                raise CommandError("--clear takes no limits")
            tokens = cost = "0"
        elif tokens is None and cost is None:
            raise CommandError("give --monthly-tokens and/or --monthly-cost, or --clear")
        had = Budget.objects.filter(tenant=tenant, user=user).exists()
        try:
            budget = set_budget(
                tenant=tenant,
                user=user,
                monthly_tokens=KEEP if tokens is None else tokens,
                monthly_cost=KEEP if cost is None else cost,
            )
        except InvalidBudget as exc:
            raise CommandError(str(exc)) from None
        whose = f"user {user.get_username()} in {tenant.name}" if user else f"tenant {tenant.name}"
        if budget is None:
            self.stdout.write(f"budget of {whose} removed" if had else f"{whose} had no budget")
            return
        # "no tokens" read as a limit of none allowed (QA): say which limit there is not.
        tokens = f"{budget.monthly_tokens} tokens" if budget.monthly_tokens else "no token limit"
        cost = (
            "no cost limit" if budget.monthly_cost is None else f"{plain(budget.monthly_cost)} cost"
        )
        self.stdout.write(f"budget of {whose}: {tokens}, {cost} a month")
        warning = unpriced_warning() if budget.monthly_cost is not None else None
        if warning:  # (the limit was taken, and would never refuse these models' calls)
            self.stderr.write(f"warning: {warning}")
