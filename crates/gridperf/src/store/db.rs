//! The two databases the store runs on, behind one small interface: SQL
//! written once (`?N` parameters, `INSERT ... ON CONFLICT`, `RETURNING`,
//! `CAST` where a parameter's type must be said), values passed and read
//! as [`Val`]. SQLite is the embedded default; PostgreSQL (`--db
//! postgres://...`) is the archive many hosts share.
//!
//! JSON columns are TEXT in SQLite and `jsonb` in PostgreSQL: a
//! [`Val::Json`] goes in as either, and reads back as a value.

/// A value passed to or read from either database.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Json(serde_json::Value),
}

impl From<Option<i64>> for Val {
    fn from(v: Option<i64>) -> Val {
        v.map_or(Val::Null, Val::Int)
    }
}
impl From<i64> for Val {
    fn from(v: i64) -> Val {
        Val::Int(v)
    }
}
impl From<f64> for Val {
    fn from(v: f64) -> Val {
        Val::Real(v)
    }
}
impl From<Option<f64>> for Val {
    fn from(v: Option<f64>) -> Val {
        v.map_or(Val::Null, Val::Real)
    }
}
impl From<&str> for Val {
    fn from(v: &str) -> Val {
        Val::Text(v.to_string())
    }
}
impl From<String> for Val {
    fn from(v: String) -> Val {
        Val::Text(v)
    }
}
impl From<Option<&str>> for Val {
    fn from(v: Option<&str>) -> Val {
        v.map_or(Val::Null, Val::from)
    }
}
impl From<Option<String>> for Val {
    fn from(v: Option<String>) -> Val {
        v.map_or(Val::Null, Val::Text)
    }
}
impl From<serde_json::Value> for Val {
    fn from(v: serde_json::Value) -> Val {
        Val::Json(v)
    }
}
impl From<Option<serde_json::Value>> for Val {
    fn from(v: Option<serde_json::Value>) -> Val {
        v.map_or(Val::Null, Val::Json)
    }
}

/// A row read back: its values by position (the SELECT names the columns).
#[derive(Debug, Clone)]
pub struct Row(pub Vec<Val>);

impl Row {
    fn at(&self, i: usize) -> &Val {
        self.0.get(i).unwrap_or(&Val::Null)
    }
    pub fn int(&self, i: usize) -> Option<i64> {
        match self.at(i) {
            Val::Int(v) => Some(*v),
            Val::Real(v) => Some(*v as i64),
            _ => None,
        }
    }
    pub fn real(&self, i: usize) -> Option<f64> {
        match self.at(i) {
            Val::Real(v) => Some(*v),
            Val::Int(v) => Some(*v as f64),
            _ => None,
        }
    }
    pub fn text(&self, i: usize) -> Option<String> {
        match self.at(i) {
            Val::Text(s) => Some(s.clone()),
            Val::Json(v) => Some(v.to_string()),
            Val::Int(v) => Some(v.to_string()),
            _ => None,
        }
    }
    /// A JSON column: parsed from SQLite's text, as it is from jsonb.
    pub fn json(&self, i: usize) -> Option<serde_json::Value> {
        match self.at(i) {
            Val::Json(v) => Some(v.clone()),
            Val::Text(s) => serde_json::from_str(s).ok(),
            _ => None,
        }
    }
}

/// What went wrong, as the database said it, and whether it is the
/// connection (unreachable, gone) rather than the statement, or the server
/// turning the connection away (its pg_hba.conf, a password, a database
/// that is not there).
#[derive(Debug)]
pub struct DbError {
    pub text: String,
    pub connection: bool,
    pub refused: bool,
    /// The DSN asks for what cannot be done (a bad sslmode, no root certificate): the user's to fix.
    pub usage: bool,
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> DbError {
        DbError { text: e.to_string(), connection: false, refused: false, usage: false }
    }
}

impl From<super::pg::PgError> for DbError {
    fn from(e: super::pg::PgError) -> DbError {
        DbError { text: e.text, connection: e.connection, refused: e.refused, usage: e.usage }
    }
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> DbError {
        super::pg::PgError::from(e).into()
    }
}

pub type DbResult<T> = std::result::Result<T, DbError>;

/// A statement's parameters: `?N` in the SQL is the N-th.
pub type Params<'a> = &'a [Val];

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value, ValueRef};
        Ok(match self {
            Val::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Val::Int(v) => ToSqlOutput::Owned(Value::Integer(*v)),
            Val::Real(v) => ToSqlOutput::Owned(Value::Real(*v)),
            Val::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Val::Json(v) => ToSqlOutput::Owned(Value::Text(v.to_string())),
        })
    }
}

impl tokio_postgres::types::ToSql for Val {
    fn to_sql(
        &self,
        ty: &tokio_postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> std::result::Result<tokio_postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use tokio_postgres::types::Type;
        match self {
            Val::Null => Ok(tokio_postgres::types::IsNull::Yes),
            Val::Int(v) => match *ty {
                Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
                Type::FLOAT8 => (*v as f64).to_sql(ty, out),
                _ => v.to_sql(ty, out),
            },
            Val::Real(v) => v.to_sql(ty, out),
            Val::Text(s) => match *ty {
                // JSON kept as text elsewhere, bound to a json column
                Type::JSONB | Type::JSON => serde_json::from_str::<serde_json::Value>(s)?.to_sql(ty, out),
                _ => s.to_sql(ty, out),
            },
            Val::Json(v) => match *ty {
                Type::TEXT | Type::VARCHAR => v.to_string().to_sql(ty, out),
                _ => v.to_sql(ty, out),
            },
        }
    }

    fn accepts(_: &tokio_postgres::types::Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// `?N` parameters as PostgreSQL writes them (`$N`).
fn pg_sql(sql: &str) -> String {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    for (i, c) in sql.char_indices() {
        if c == '?' && b.get(i + 1).is_some_and(u8::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

fn pg_row(r: &tokio_postgres::Row) -> DbResult<Row> {
    use tokio_postgres::types::Type;
    let mut vals = Vec::with_capacity(r.len());
    for (i, c) in r.columns().iter().enumerate() {
        let v = match *c.type_() {
            Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map(Val::Int),
            Type::INT4 => r.try_get::<_, Option<i32>>(i)?.map(|v| Val::Int(v.into())),
            Type::INT2 => r.try_get::<_, Option<i16>>(i)?.map(|v| Val::Int(v.into())),
            Type::FLOAT8 => r.try_get::<_, Option<f64>>(i)?.map(Val::Real),
            Type::FLOAT4 => r.try_get::<_, Option<f32>>(i)?.map(|v| Val::Real(v.into())),
            Type::BOOL => r.try_get::<_, Option<bool>>(i)?.map(|v| Val::Int(v.into())),
            Type::JSONB | Type::JSON => r.try_get::<_, Option<serde_json::Value>>(i)?.map(Val::Json),
            Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => r.try_get::<_, Option<String>>(i)?.map(Val::Text),
            ref other => {
                return Err(DbError {
                    text: format!("column {} is of type {other}, which the store does not read", c.name()),
                    connection: false,
                    refused: false,
                    usage: false,
                })
            }
        };
        vals.push(v.unwrap_or(Val::Null));
    }
    Ok(Row(vals))
}

fn sqlite_row(r: &rusqlite::Row, n: usize) -> rusqlite::Result<Row> {
    use rusqlite::types::ValueRef;
    let mut vals = Vec::with_capacity(n);
    for i in 0..n {
        vals.push(match r.get_ref(i)? {
            ValueRef::Null => Val::Null,
            ValueRef::Integer(v) => Val::Int(v),
            ValueRef::Real(v) => Val::Real(v),
            ValueRef::Text(t) | ValueRef::Blob(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
        });
    }
    Ok(Row(vals))
}

/// The database a store runs on.
pub enum Db {
    Sqlite(rusqlite::Connection),
    /// A connection whose every wait has a deadline ([`super::pg`]).
    Postgres(super::pg::Pg),
}

impl Db {
    /// Connects to a PostgreSQL server (a `postgres://` or `postgresql://`
    /// URL, or libpq's key=value words, with libpq's parameters: host may
    /// be a socket directory; sslmode and sslrootcert as libpq takes them).
    pub fn connect_postgres(dsn: &str) -> DbResult<Db> {
        Ok(Db::Postgres(super::pg::Pg::connect(dsn)?))
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self, Db::Postgres(_))
    }

    /// Runs a statement; the rows it changed.
    pub fn execute(&self, sql: &str, params: Params) -> DbResult<u64> {
        match self {
            Db::Sqlite(c) => Ok(c.execute(sql, rusqlite::params_from_iter(params.iter()))? as u64),
            Db::Postgres(c) => {
                let p: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params.iter().map(|v| v as _).collect();
                Ok(c.execute(pg_sql(sql).as_str(), &p)?)
            }
        }
    }

    /// Runs a query; its rows.
    pub fn query(&self, sql: &str, params: Params) -> DbResult<Vec<Row>> {
        match self {
            Db::Sqlite(c) => {
                let mut st = c.prepare(sql)?;
                let n = st.column_count();
                let rows = st.query_map(rusqlite::params_from_iter(params.iter()), |r| sqlite_row(r, n))?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            }
            Db::Postgres(c) => {
                let p: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = params.iter().map(|v| v as _).collect();
                c.query(pg_sql(sql).as_str(), &p)?.iter().map(pg_row).collect()
            }
        }
    }

    /// The first row of a query, if any.
    pub fn query_opt(&self, sql: &str, params: Params) -> DbResult<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// Runs `work` in one transaction; in PostgreSQL under an advisory
    /// lock, so that hosts bringing one archive's schema up at once do it
    /// one after the other (each reads the version inside). An error
    /// rolls everything back.
    pub fn in_transaction(&self, lock: i64, work: &mut dyn FnMut(&Db) -> DbResult<()>) -> DbResult<()> {
        match self {
            Db::Sqlite(c) => {
                c.execute_batch("BEGIN IMMEDIATE")?;
                match work(self) {
                    Ok(()) => Ok(c.execute_batch("COMMIT")?),
                    Err(e) => {
                        let _ = c.execute_batch("ROLLBACK");
                        Err(e)
                    }
                }
            }
            Db::Postgres(c) => {
                c.batch("BEGIN")?;
                let locked = self.execute("SELECT pg_advisory_xact_lock(?1)", &[Val::Int(lock)]).map(drop);
                match locked.and_then(|()| work(self)) {
                    Ok(()) => Ok(c.batch("COMMIT")?),
                    Err(e) => {
                        let _ = c.batch("ROLLBACK");
                        Err(e)
                    }
                }
            }
        }
    }

    /// Runs statements, no parameters, as one batch.
    pub fn batch(&self, sql: &str) -> DbResult<()> {
        match self {
            Db::Sqlite(c) => Ok(c.execute_batch(sql)?),
            Db::Postgres(c) => Ok(c.batch(sql)?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_numbered_for_postgres() {
        assert_eq!(pg_sql("SELECT ?1, ?12 WHERE a = '?' AND b = ?2"), "SELECT $1, $12 WHERE a = '?' AND b = $2");
    }

    #[test]
    fn sqlite_reads_back_what_it_was_given() {
        let db = Db::Sqlite(rusqlite::Connection::open_in_memory().expect("memory"));
        db.batch("CREATE TABLE t (a INTEGER, b REAL, c TEXT, d TEXT)").expect("table");
        let j = serde_json::json!({"x": [1, 2]});
        db.execute(
            "INSERT INTO t VALUES (?1, ?2, ?3, ?4)",
            &[Val::Int(-3), Val::Real(2.5), "é".into(), j.clone().into()],
        )
        .expect("insert");
        let r = db.query_opt("SELECT a, b, c, d, NULL FROM t", &[]).expect("query").expect("a row");
        assert_eq!((r.int(0), r.real(1), r.text(2), r.json(3)), (Some(-3), Some(2.5), Some("é".into()), Some(j)));
        assert_eq!(r.text(4), None);
    }
}
