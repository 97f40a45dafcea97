/**
 * A double-entry bank ledger with validation.
 *
 * Amounts are stored as integer minor units (cents) to avoid floating point
 * drift.  Every transaction must balance: the sum of its postings is zero.
 * Accounts may forbid overdrafts, and transactions are applied atomically.
 */

export type AccountKind = "asset" | "liability" | "income" | "expense" | "equity";

export interface Account {
  readonly id: string;
  readonly name: string;
  readonly kind: AccountKind;
  readonly currency: string;
  allowOverdraft: boolean;
  balance: number;
  closed: boolean;
}

export interface Posting {
  accountId: string;
  amount: number; // minor units, positive = debit, negative = credit
}

export interface Transaction {
  readonly id: number;
  readonly date: Date;
  readonly memo: string;
  readonly postings: readonly Posting[];
}

export class LedgerError extends Error {
  constructor(message: string, public readonly code: string) {
    super(message);
    this.name = "LedgerError";
  }
}

/** Parse a decimal string such as "12.34" or "-0.5" into minor units. */
export function parseAmount(text: string, decimals = 2): number {
  const match = /^(-)?(\d+)(?:\.(\d+))?$/.exec(text.trim());
  if (!match) {
    throw new LedgerError(`not a valid amount: '${text}'`, "bad_amount");
  }
  const [, sign, whole, fraction = ""] = match;
  if (fraction.length > decimals) {
    throw new LedgerError(`too many decimal places in '${text}'`, "bad_amount");
  }
  const units = Number(whole) * 10 ** decimals + Number(fraction.padEnd(decimals, "0"));
  return sign ? -units : units;
}

export function formatAmount(units: number, currency: string, decimals = 2): string {
  const sign = units < 0 ? "-" : "";
  const abs = Math.abs(units);
  const whole = Math.floor(abs / 10 ** decimals);
  const fraction = String(abs % 10 ** decimals).padStart(decimals, "0");
  const grouped = whole.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return `${sign}${grouped}.${fraction} ${currency}`;
}

export class Ledger {
  private readonly accounts = new Map<string, Account>();
  private readonly journal: Transaction[] = [];
  private nextTransactionId = 1;

  openAccount(id: string, name: string, kind: AccountKind, currency = "EUR", allowOverdraft = false): Account {
    if (!/^[a-z0-9:_-]+$/.test(id)) {
      throw new LedgerError(`invalid account id '${id}'`, "bad_account_id");
    }
    if (this.accounts.has(id)) {
      throw new LedgerError(`account '${id}' already exists`, "duplicate_account");
    }
    const account: Account = { id, name, kind, currency, allowOverdraft, balance: 0, closed: false };
    this.accounts.set(id, account);
    return account;
  }

  closeAccount(id: string): void {
    const account = this.getAccount(id);
    if (account.balance !== 0) {
      throw new LedgerError(`account '${id}' still holds ${formatAmount(account.balance, account.currency)}`, "nonzero_balance");
    }
    account.closed = true;
  }

  getAccount(id: string): Account {
    const account = this.accounts.get(id);
    if (!account) {
      throw new LedgerError(`unknown account '${id}'`, "unknown_account");
    }
    return account;
  }

  /** Validate and apply a transaction; nothing changes if validation fails. */
  record(memo: string, postings: Posting[], date: Date = new Date()): Transaction {
    this.validate(postings);
    for (const posting of postings) {
      this.getAccount(posting.accountId).balance += posting.amount;
    }
    const transaction: Transaction = {
      id: this.nextTransactionId++,
      date,
      memo,
      postings: postings.map((p) => ({ ...p })),
    };
    this.journal.push(transaction);
    return transaction;
  }

  private validate(postings: Posting[]): void {
    if (postings.length < 2) {
      throw new LedgerError("a transaction needs at least two postings", "too_few_postings");
    }
    let total = 0;
    const currencies = new Set<string>();
    const projected = new Map<string, number>();
    for (const posting of postings) {
      if (!Number.isSafeInteger(posting.amount) || posting.amount === 0) {
        throw new LedgerError(`invalid posting amount ${posting.amount}`, "bad_amount");
      }
      const account = this.getAccount(posting.accountId);
      if (account.closed) {
        throw new LedgerError(`account '${account.id}' is closed`, "account_closed");
      }
      currencies.add(account.currency);
      total += posting.amount;
      const before = projected.get(account.id) ?? account.balance;
      projected.set(account.id, before + posting.amount);
    }
    if (currencies.size > 1) {
      throw new LedgerError(`mixed currencies: ${[...currencies].join(", ")}`, "mixed_currency");
    }
    if (total !== 0) {
      throw new LedgerError(`transaction does not balance (off by ${total})`, "unbalanced");
    }
    for (const [id, balance] of projected) {
      const account = this.getAccount(id);
      if (account.kind === "asset" && !account.allowOverdraft && balance < 0) {
        throw new LedgerError(`insufficient funds in '${id}'`, "overdraft");
      }
    }
  }

  /** Convenience wrapper: move money between two accounts. */
  transfer(from: string, to: string, amount: string | number, memo = "transfer"): Transaction {
    const units = typeof amount === "string" ? parseAmount(amount) : amount;
    if (units <= 0) {
      throw new LedgerError("transfer amount must be positive", "bad_amount");
    }
    return this.record(memo, [
      { accountId: to, amount: units },
      { accountId: from, amount: -units },
    ]);
  }

  history(accountId: string): Array<{ transaction: Transaction; amount: number; running: number }> {
    this.getAccount(accountId);
    let running = 0;
    const rows: Array<{ transaction: Transaction; amount: number; running: number }> = [];
    for (const transaction of this.journal) {
      for (const posting of transaction.postings) {
        if (posting.accountId !== accountId) continue;
        running += posting.amount;
        rows.push({ transaction, amount: posting.amount, running });
      }
    }
    return rows;
  }

  trialBalance(): { lines: string[]; balanced: boolean } {
    let sum = 0;
    const lines: string[] = [];
    const sorted = [...this.accounts.values()].sort((a, b) => a.id.localeCompare(b.id));
    for (const account of sorted) {
      sum += account.balance;
      lines.push(`${account.id.padEnd(24)} ${formatAmount(account.balance, account.currency).padStart(18)}`);
    }
    return { lines, balanced: sum === 0 };
  }
}

export function demo(): void {
  const ledger = new Ledger();
  ledger.openAccount("assets:checking", "Checking", "asset");
  ledger.openAccount("assets:savings", "Savings", "asset");
  ledger.openAccount("equity:opening", "Opening balance", "equity");
  ledger.openAccount("expenses:rent", "Rent", "expense");

  ledger.transfer("equity:opening", "assets:checking", "2500.00", "opening balance");
  ledger.transfer("assets:checking", "expenses:rent", "950.00", "March rent");
  ledger.transfer("assets:checking", "assets:savings", 40000, "monthly saving");
  try {
    ledger.transfer("assets:savings", "expenses:rent", "1000.00", "too much");
  } catch (err) {
    if (err instanceof LedgerError) console.log(`rejected (${err.code}): ${err.message}`);
    else throw err;
  }
  const { lines, balanced } = ledger.trialBalance();
  console.log(lines.join("\n"));
  console.log(balanced ? "books balance" : "books DO NOT balance");
}
