import { resolve } from 'node:path';

/**
 * Which database, never its credentials: with DATABASE_URL set in the shell (a backend team's
 * usual setup), `npm start` used that database, not the demo's SQLite file, and created its tables
 * there, while the banner said only "(postgres, …)". serve's and work's start lines use it.
 */
export function databaseName(url: string): string {
  const from = process.env.DATABASE_URL ? ' from DATABASE_URL' : '';
  if (url.startsWith('sqlite:')) {
    const file = url.slice('sqlite:'.length).split('?')[0]!;
    return `sqlite ${file === ':memory:' ? file : resolve(file)}${from}`;
  }
  try {
    const u = new URL(url);
    return `postgres ${u.host}${u.pathname}${from}`;
  } catch {
    return `postgres${from}`;
  }
}
