"""A small paraphrase set of our own: support-bot questions, each intent asked several ways — near-duplicates (case,
punctuation, numbers, typos), reorderings and paraphrases that reuse some words, and a few in other words.

Used to tune the groupers' thresholds and to state their pairwise precision and recall (docs/questions.md)."""

from __future__ import annotations

INTENTS: dict[str, list[str]] = {
    "reset_password": [
        "How do I reset my password?",
        "how do i reset my password",
        "How can I reset my password??",
        "I forgot my password, how do I reset it?",
        "password reset",
        "Reset password not working",
    ],
    "cancel_subscription": [
        "How do I cancel my subscription?",
        "cancel subscription",
        "I want to cancel my subscription",
        "How can I cancel my monthly subscription?",
        "Where do I cancel the subscription?",
    ],
    "refund": [
        "Can I get a refund for order 12345?",
        "Can I get a refund for order 98812?",
        "How do I request a refund?",
        "refund request for my order",
        "I want a refund",
    ],
    "change_email": [
        "How do I change my email address?",
        "change email address on my account",
        "Can I change the email on my account?",
        "update my email address",
    ],
    "delivery_time": [
        "How long does delivery take?",
        "How long will delivery take to Germany?",
        "delivery time?",
        "What is the delivery time for orders?",
    ],
    "track_order": [
        "Where is my order?",
        "Where is my order AB12345?",
        "track my order",
        "How can I track my order?",
        "tracking my order status",
    ],
    "api_rate_limit": [
        "What is the API rate limit?",
        "what's the rate limit of the api",
        "API rate limits per minute",
        "Is there a rate limit on the API?",
    ],
    "export_data": [
        "How do I export my data to CSV?",
        "export data as csv",
        "Can I export my data?",
        "exporting data to a CSV file",
    ],
    "two_factor": [
        "How do I enable two-factor authentication?",
        "enable two factor authentication",
        "How to turn on two-factor authentication",
        "2FA setup: enable two-factor authentication",
    ],
    "invoice": [
        "Where can I download my invoice?",
        "download invoice",
        "How do I download invoices?",
        "invoice download for last month",
    ],
    "delete_account": [
        "How do I delete my account?",
        "delete my account",
        "Can I delete my account permanently?",
        "account deletion",
    ],
    "pricing_plans": [
        "What pricing plans do you offer?",
        "pricing plans",
        "Which plans and pricing are available?",
        "How much do the pricing plans cost?",
    ],
    "add_user": [
        "How do I add a new user to my team?",
        "add user to team",
        "Can I add more users to my team?",
        "adding team users",
    ],
    "opening_hours": [
        "What are your support opening hours?",
        "support hours",
        "When is support open?",
        "support opening hours on weekends",
    ],
}


def labelled() -> list[tuple[str, str]]:
    """(question, intent), intents interleaved as traffic would mix them."""
    rows: list[tuple[str, str]] = []
    longest = max(len(v) for v in INTENTS.values())
    for i in range(longest):
        for intent, questions in INTENTS.items():
            if i < len(questions):
                rows.append((questions[i], intent))
    return rows


def pairwise(truth: list[str], predicted: list[str]) -> tuple[float, float]:
    """Pairwise precision and recall: of the pairs put in one group, the share that are one intent; of the pairs
    of one intent, the share put in one group."""
    together = same = both = 0
    n = len(truth)
    for i in range(n):
        for j in range(i + 1, n):
            grouped, one_intent = predicted[i] == predicted[j], truth[i] == truth[j]
            together += grouped
            same += one_intent
            both += grouped and one_intent
    return (both / together if together else 1.0), (both / same if same else 1.0)
